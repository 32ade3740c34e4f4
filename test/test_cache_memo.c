/* The memo of recent lookups: it never answers with a retired registration, across the
 * wrap of its epoch, a retirement takes out only its own entry's slots, and a miss memoizes
 * what it inserts where it pays. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vmtrack.h>

#include "lib/vmt_test.h"

/* A retirement invalidates the memo slots of its entry; an entry memoized at more than four
 * pages moves the cache's memo epoch instead, which invalidates every slot.
 * VMTRACK_TEST_EPOCH_WRAP=1 starts the epoch 1024 moves short of the wrap of its low half, so
 * that the 1500 moves here (every other retirement is of such an entry) take it across: no get
 * may ever be answered by a retired registration, before, during or after the memo is cleared,
 * by either way of invalidating. */
START_TEST(memo_never_stale_across_retirements)
{
    struct fixture fx;
    ck_assert_int_eq(setenv("VMTRACK_TEST_EPOCH_WRAP", "1", 1), 0);
    fixture_open(&fx, "none", 0);
    ck_assert_int_eq(unsetenv("VMTRACK_TEST_EPOCH_WRAP"), 0);
    char *buf = map_anon(16 * page);
    char *other = buf + 12 * page;
    for (int i = 0; i < 3000; i++) {
        struct vmt_reg *a = get_ok(fx.dev, buf, 8 * page, VMT_ACCESS_READ);
        ck_assert_int_eq(atomic_load(&fx.fake.regs), i + 1 + (i > 0));  /* a miss: registered anew */
        vmt_put(a);
        int pages = i % 2 ? 6 : 1;  /* six pages overflow the entry's four memo lanes */
        for (int k = 0; k < 3 * pages; k++) {  /* a walk of the index, then memo hits */
            char *at = buf + (k % pages) * page + 100;
            struct vmt_reg *again = get_ok(fx.dev, at, 10, VMT_ACCESS_READ);
            ck_assert_ptr_eq(again, a);
            struct fake_reg *h = vmt_reg_handle(again);
            ck_assert_int_eq(h->live, 1);
            ck_assert_ptr_eq(h->addr, buf);
            vmt_put(again);
        }
        /* Another range stays cached all along: its memo slot must keep answering right. */
        struct vmt_reg *b = get_ok(fx.dev, other, page, VMT_ACCESS_READ);
        struct fake_reg *hb = vmt_reg_handle(b);
        ck_assert_int_eq(hb->live, 1);
        ck_assert_ptr_eq(hb->addr, other);
        vmt_put(b);
        ck_assert_int_eq(vmt_invalidate(fx.cache, buf, 8 * page), 0);
        ck_assert_int_eq(atomic_load(&fx.fake.deregs), i + 1);
    }
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_ge(s.memo_wraps, 1);
    ck_assert_uint_ge(s.memo_hits, 3000);
    ck_assert_uint_le(s.memo_hits, s.hits);
    ck_assert_int_eq(vmt_flush(fx.cache), 0);
    munmap(buf, 16 * page);
    fixture_close(&fx);
}
END_TEST

/* A retirement leaves the memo slots of other entries valid: a range hit between misses that
 * evict or invalidate other ranges is hit through the memo every time (a cache under its entry
 * limit retires at every miss; its hot ranges must not walk the index each time). */
START_TEST(memo_survives_other_retirements)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    char *buf = map_anon(8 * page);
    char *hot = buf + 4 * page;
    vmt_put(get_ok(fx.dev, hot, page, VMT_ACCESS_READ));  /* cached */
    vmt_put(get_ok(fx.dev, hot, page, VMT_ACCESS_READ));  /* a walk of the index: memoized */
    for (int i = 0; i < 200; i++) {
        vmt_put(get_ok(fx.dev, buf, page, VMT_ACCESS_READ));
        ck_assert_int_eq(vmt_invalidate(fx.cache, buf, page), 0);
        uint64_t before = stats_of(fx.cache).memo_hits;
        struct vmt_reg *h = get_ok(fx.dev, hot, page, VMT_ACCESS_READ);
        ck_assert_ptr_eq(((struct fake_reg *)vmt_reg_handle(h))->addr, hot);
        vmt_put(h);
        ck_assert_uint_eq(stats_of(fx.cache).memo_hits, before + 1);
    }
    ck_assert_int_eq(atomic_load(&fx.fake.deregs), 200);
    ck_assert_int_eq(vmt_flush(fx.cache), 0);
    munmap(buf, 8 * page);
    fixture_close(&fx);
}
END_TEST

/* A get whose memo set holds nothing valid skips the set and walks the index (a fresh page's
 * set is mostly not in any CPU cache). The range's own retirement leaves its set empty; the
 * walk that fills the slot again must mark the set live again, or the range would never be
 * hit through the memo again. */
START_TEST(memo_refills_after_own_retirement)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    char *buf = map_anon(4 * page);
    for (int i = 0; i < 200; i++) {
        char *at = buf + (i % 4) * page;
        struct vmt_reg *miss = get_ok(fx.dev, at, page, VMT_ACCESS_READ);
        ck_assert_int_eq(atomic_load(&fx.fake.regs), i + 1);
        vmt_put(miss);
        vmt_put(get_ok(fx.dev, at, page, VMT_ACCESS_READ));  /* a walk of the index: memoized */
        uint64_t before = stats_of(fx.cache).memo_hits;
        struct vmt_reg *hit = get_ok(fx.dev, at + 8, 16, VMT_ACCESS_READ);
        ck_assert_ptr_eq(hit, miss);
        vmt_put(hit);
        ck_assert_uint_eq(stats_of(fx.cache).memo_hits, before + 1);
        ck_assert_int_eq(vmt_invalidate(fx.cache, at, page), 0);
        ck_assert_int_eq(atomic_load(&fx.fake.deregs), i + 1);
    }
    munmap(buf, 4 * page);
    fixture_close(&fx);
}
END_TEST

/* A miss memoizes what it inserts where its page was hit through the index before (a range
 * that comes back after its eviction, as under a working set larger than the cache): its next
 * get is a memo hit. A page never hit before is not memoized by its miss (a buffer used once
 * would pay for a slot it never reads): its next get walks the index. */
START_TEST(memo_filled_by_miss_of_a_page_hit_before)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    char *buf = map_anon(4 * page);
    vmt_put(get_ok(fx.dev, buf, page, VMT_ACCESS_READ));  /* a miss of a page never hit */
    uint64_t before = stats_of(fx.cache).memo_hits;
    vmt_put(get_ok(fx.dev, buf, page, VMT_ACCESS_READ));  /* a walk of the index */
    ck_assert_uint_eq(stats_of(fx.cache).memo_hits, before);
    for (int i = 0; i < 100; i++) {
        ck_assert_int_eq(vmt_invalidate(fx.cache, buf, page), 0);
        struct vmt_reg *miss = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
        ck_assert_int_eq(atomic_load(&fx.fake.regs), i + 2);
        vmt_put(miss);
        before = stats_of(fx.cache).memo_hits;
        struct vmt_reg *hit = get_ok(fx.dev, buf + 8, 16, VMT_ACCESS_READ);
        ck_assert_ptr_eq(hit, miss);
        ck_assert_int_eq(((struct fake_reg *)vmt_reg_handle(hit))->live, 1);
        vmt_put(hit);
        ck_assert_uint_eq(stats_of(fx.cache).memo_hits, before + 1);
    }
    ck_assert_int_eq(vmt_flush(fx.cache), 0);
    munmap(buf, 4 * page);
    fixture_close(&fx);
}
END_TEST

/* Buffers side by side at the strides programs allocate them (64 KiB to 384 KiB apart): the
 * memo's sets must hold 4096 of them as they hold random pages. Steady hits are memo hits
 * but for the few pages a set cannot hold (with random pages, about 1 in 100 for 4096 in
 * 16384 two-way sets); a hash that clustered such strides sent a fifth of them to the index. */
START_TEST(memo_spreads_buffers_at_common_strides)
{
    static const size_t strides[] = {16, 24, 32, 64, 96};  /* in pages */
    const size_t n = 4096;

    for (size_t k = 0; k < sizeof(strides) / sizeof(strides[0]); k++) {
        struct fixture fx;
        size_t span = n * strides[k] * page;
        char *buf = mmap(NULL, span, PROT_READ | PROT_WRITE,
                         MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
        ck_assert_ptr_ne(buf, MAP_FAILED);
        fixture_open(&fx, "none", 0);
        for (int pass = 0; pass < 2; pass++)  /* misses, then hits through the index */
            for (size_t i = 0; i < n; i++)
                vmt_put(get_ok(fx.dev, buf + i * strides[k] * page, page, VMT_ACCESS_READ));
        uint64_t before = stats_of(fx.cache).memo_hits;
        for (size_t i = 0; i < n; i++)
            vmt_put(get_ok(fx.dev, buf + i * strides[k] * page, page, VMT_ACCESS_READ));
        uint64_t memo = stats_of(fx.cache).memo_hits - before;
        ck_assert_msg(memo * 100 >= n * 97, "%zu pages %zu pages apart: %llu of %zu steady "
                      "hits from the memo", n, strides[k], (unsigned long long)memo, n);
        ck_assert_int_eq(vmt_flush(fx.cache), 0);
        fixture_close(&fx);
        munmap(buf, span);
    }
}
END_TEST

int main(void)
{
    const TTest *const cases[] = {memo_never_stale_across_retirements,
                                  memo_survives_other_retirements,
                                  memo_refills_after_own_retirement,
                                  memo_filled_by_miss_of_a_page_hit_before,
                                  memo_spreads_buffers_at_common_strides, NULL};
    return check_run_cases("cache memo", 60, cases);
}
