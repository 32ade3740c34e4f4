/* The cache's lookup, against a fake device: a get inside a registered range hits, one
 * past it misses (and merges), thousands of disjoint ranges are found again before and
 * after removals, and the handle and memo-only variants of vmt_get. */
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

START_TEST(hit_and_miss)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    ck_assert_str_eq(vmt_cache_tracker(fx.cache), "none");
    char *buf = map_anon(8 * page);
    struct vmt_reg *a = get_ok(fx.dev, buf + 100, 2 * page, VMT_ACCESS_READ);
    ck_assert_ptr_eq(vmt_reg_addr(a), buf);  /* page aligned */
    ck_assert_uint_eq(vmt_reg_len(a), 3 * page);
    struct fake_reg *h = vmt_reg_handle(a);
    ck_assert_ptr_eq(h->addr, buf);
    ck_assert_uint_eq(h->len, 3 * page);
    struct vmt_reg *b = get_ok(fx.dev, buf + page, 10, VMT_ACCESS_READ);
    ck_assert_ptr_eq(a, b);
    vmt_put(a);
    vmt_put(b);
    struct vmt_reg *c = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    ck_assert_ptr_eq(c, a);
    vmt_put(c);
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_eq(s.registrations, 1);
    ck_assert_uint_eq(s.misses, 1);
    ck_assert_uint_eq(s.hits, 2);
    ck_assert_uint_eq(s.entries, 1);
    ck_assert_uint_eq(s.bytes_registered, 3 * page);
    /* A range that only touches an entry larger than itself misses and registers alone: a
     * neighbour that only touches is absorbed while it is no larger than the request. */
    struct vmt_reg *d = get_ok(fx.dev, buf + 3 * page, page, VMT_ACCESS_READ);
    ck_assert_ptr_eq(vmt_reg_addr(d), buf + 3 * page);
    ck_assert_uint_eq(vmt_reg_len(d), page);
    vmt_put(d);
    s = stats_of(fx.cache);
    ck_assert_uint_eq(s.merges, 0);
    ck_assert_uint_eq(s.entries, 2);
    /* A larger one touching it registers the union (d's page and its own 4). */
    struct vmt_reg *e = get_ok(fx.dev, buf + 4 * page, 4 * page, VMT_ACCESS_READ);
    ck_assert_ptr_eq(vmt_reg_addr(e), buf + 3 * page);
    ck_assert_uint_eq(vmt_reg_len(e), 5 * page);
    vmt_put(e);
    s = stats_of(fx.cache);
    ck_assert_uint_eq(s.merges, 1);
    ck_assert_uint_eq(s.entries, 2);
    ck_assert_int_eq(vmt_flush(fx.cache), 0);
    ck_assert_int_eq(atomic_load(&fx.fake.live), 0);
    munmap(buf, 8 * page);
    fixture_close(&fx);
}
END_TEST

/* Many disjoint ranges hit at random: the index finds each, before and after removals. */
START_TEST(index_many)
{
    enum { N = 3000 };
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    char *base = map_anon(2 * N * page);
    struct vmt_reg *regs[N];
    unsigned order[N];
    for (unsigned i = 0; i < N; i++)
        order[i] = i;
    srand(7);
    for (unsigned i = N - 1; i > 0; i--) {
        unsigned j = (unsigned)rand() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (unsigned k = 0; k < N; k++) {
        unsigned i = order[k];
        regs[i] = get_ok(fx.dev, base + 2 * i * page, page, VMT_ACCESS_READ);
        ck_assert_ptr_eq(vmt_reg_addr(regs[i]), base + 2 * i * page);
        vmt_put(regs[i]);
    }
    ck_assert_uint_eq(stats_of(fx.cache).entries, N);
    for (unsigned k = 0; k < N; k++) {
        unsigned i = order[(k * 7919) % N];
        struct vmt_reg *r = get_ok(fx.dev, base + 2 * i * page + 5, 10, VMT_ACCESS_READ);
        ck_assert_ptr_eq(r, regs[i]);
        vmt_put(r);
    }
    ck_assert_uint_eq(stats_of(fx.cache).registrations, N);
    /* Drop every third range; the others still hit, the dropped ones register again. */
    for (unsigned i = 0; i < N; i += 3)
        ck_assert_int_eq(vmt_invalidate(fx.cache, base + 2 * i * page, page), 0);
    ck_assert_uint_eq(stats_of(fx.cache).entries, N - (N + 2) / 3);
    for (unsigned i = 0; i < N; i++) {
        struct vmt_reg *r = get_ok(fx.dev, base + 2 * i * page, page, VMT_ACCESS_READ);
        if (i % 3)
            ck_assert_ptr_eq(r, regs[i]);
        ck_assert_ptr_eq(vmt_reg_addr(r), base + 2 * i * page);
        vmt_put(r);
    }
    ck_assert_uint_eq(stats_of(fx.cache).registrations, N + (N + 2) / 3);
    ck_assert_uint_eq(atomic_load(&fx.fake.deregs), (N + 2) / 3);
    munmap(base, 2 * N * page);
    fixture_close(&fx);
}
END_TEST

/* vmt_get_handle gives what ops->reg stored: on a miss, on the first hits (through the tree,
 * which fills the memo) and the steady ones (through the memo), the new registration's after
 * an invalidation; NULL with an error; and it refuses a NULL handle. */
static void *handle_of_get(struct vmt_device *dev, void *addr, size_t len, struct vmt_reg **r)
{
    void *h = (void *)1;
    ck_assert_int_eq(vmt_get_handle(dev, addr, len, VMT_ACCESS_READ, r, &h), 0);
    ck_assert_ptr_eq(h, vmt_reg_handle(*r));
    return h;
}

START_TEST(get_handle_gives_the_registrations_handle)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    char *buf = map_anon(4 * page);
    struct vmt_reg *r1, *r2, *r3;
    void *h1 = handle_of_get(fx.dev, buf, 2 * page, &r1);           /* a miss */
    ck_assert_ptr_eq(((struct fake_reg *)h1)->addr, buf);
    ck_assert_ptr_eq(handle_of_get(fx.dev, buf + 10, page, &r2), h1); /* hits */
    ck_assert_ptr_eq(handle_of_get(fx.dev, buf + page, page, &r3), h1);
    ck_assert_ptr_eq(r2, r1);
    vmt_put(r1);
    vmt_put(r2);
    vmt_put(r3);
    for (int i = 0; i < 4; i++) {   /* steady hits, through the memo */
        ck_assert_ptr_eq(handle_of_get(fx.dev, buf, page, &r1), h1);
        vmt_put(r1);
    }
    ck_assert_uint_ge(stats_of(fx.cache).hits, 6);
    ck_assert_int_eq(vmt_invalidate(fx.cache, buf, page), 0);
    void *h2 = handle_of_get(fx.dev, buf, 2 * page, &r1);            /* registered again */
    ck_assert_uint_eq(stats_of(fx.cache).registrations, 2);
    ck_assert_ptr_eq(((struct fake_reg *)h2)->addr, buf);
    vmt_put(r1);
    void *h = (void *)1;
    ck_assert_int_eq(vmt_get_handle(fx.dev, buf, 0, VMT_ACCESS_READ, &r1, &h), -EINVAL);
    ck_assert_ptr_null(h);
    ck_assert_int_eq(vmt_get_handle(fx.dev, buf, page, VMT_ACCESS_READ, &r1, NULL), -EINVAL);
    ck_assert_int_eq(vmt_get_handle(NULL, buf, page, VMT_ACCESS_READ, &r1, &h), -EINVAL);
    ck_assert_int_eq(vmt_flush(fx.cache), 0);
    ck_assert_int_eq(atomic_load(&fx.fake.live), 0);
    munmap(buf, 4 * page);
    fixture_close(&fx);
}
END_TEST

/* vmt_get_memo, -EAGAIN: nothing held, nothing registered, *out and *handle as they were. */
static void memo_says_again(struct fixture *fx, const void *addr, size_t len, unsigned access)
{
    struct vmt_reg *r = (struct vmt_reg *)&r;
    void *h = &h;
    long regs = atomic_load(&fx->fake.regs);
    ck_assert_int_eq(vmt_get_memo(fx->dev, addr, len, access, &r, &h), -EAGAIN);
    ck_assert_ptr_eq(r, (struct vmt_reg *)&r);
    ck_assert_ptr_eq(h, &h);
    ck_assert_int_eq(atomic_load(&fx->fake.regs), regs);
}

/* A steady hit of [addr, addr+len) through vmt_get_handle: whether the memo answered it. */
static int hit_came_from_memo(struct fixture *fx, void *addr, size_t len)
{
    struct vmt_reg *r;
    void *h;
    uint64_t before = stats_of(fx->cache).memo_hits;
    ck_assert_int_eq(vmt_get_handle(fx->dev, addr, len, VMT_ACCESS_READ, &r, &h), 0);
    vmt_put(r);
    return stats_of(fx->cache).memo_hits > before;
}

/* vmt_get_memo answers from the memo or not at all: what a steady hit finds there, held like
 * vmt_get_handle's, and -EAGAIN (never a registration, never a stale one) for the rest. */
START_TEST(get_memo_answers_only_from_the_memo)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    char *buf = map_anon(8 * page);
    struct vmt_reg *r, *cached;
    void *h;

    memo_says_again(&fx, buf, page, VMT_ACCESS_READ);       /* nothing cached */
    ck_assert_uint_eq(stats_of(fx.cache).registrations, 0);
    cached = get_ok(fx.dev, buf, 2 * page, VMT_ACCESS_READ);  /* the miss registers */
    vmt_put(cached);
    int memo = 0;
    for (int i = 0; i < 4 && !memo; i++)
        memo = hit_came_from_memo(&fx, buf, page);
    if (!memo) {
        /* readers fence here (no membarrier): the memo is never filled */
        printf("get_memo: the memo is off in this process; checked that it answers -EAGAIN\n");
        memo_says_again(&fx, buf, page, VMT_ACCESS_READ);
    } else {
        struct vmt_stats before = stats_of(fx.cache);
        ck_assert_int_eq(vmt_get_memo(fx.dev, buf + 10, 100, VMT_ACCESS_READ, &r, &h), 0);
        ck_assert_ptr_eq(r, cached);
        ck_assert_ptr_eq(h, vmt_reg_handle(cached));
        struct vmt_stats after = stats_of(fx.cache);
        ck_assert_uint_eq(after.hits, before.hits + 1);
        ck_assert_uint_eq(after.memo_hits, before.memo_hits + 1);
        /* held: the invalidation takes it out of the cache, the put deregisters it */
        ck_assert_int_eq(vmt_invalidate(fx.cache, buf, page), 0);
        memo_says_again(&fx, buf, page, VMT_ACCESS_READ);
        ck_assert_int_eq(vmt_flush(fx.cache), 0);
        ck_assert_int_eq(atomic_load(&fx.fake.live), 1);
        vmt_put(r);
        ck_assert_int_eq(vmt_flush(fx.cache), 0);
        ck_assert_int_eq(atomic_load(&fx.fake.live), 0);
        /* cached again: no handle wanted; more rights or a longer range are not its to give */
        cached = get_ok(fx.dev, buf, 2 * page, VMT_ACCESS_READ);
        vmt_put(cached);
        for (int i = 0; i < 4 && !hit_came_from_memo(&fx, buf, page); i++)
            ;
        ck_assert_int_eq(vmt_get_memo(fx.dev, buf, page, VMT_ACCESS_READ, &r, NULL), 0);
        ck_assert_ptr_eq(r, cached);
        vmt_put(r);
        memo_says_again(&fx, buf, page, VMT_ACCESS_READ | VMT_ACCESS_WRITE);
        memo_says_again(&fx, buf, 3 * page, VMT_ACCESS_READ);
    }
    ck_assert_int_eq(vmt_get_memo(NULL, buf, page, VMT_ACCESS_READ, &r, &h), -EINVAL);
    ck_assert_int_eq(vmt_get_memo(fx.dev, buf, page, VMT_ACCESS_READ, NULL, &h), -EINVAL);
    ck_assert_int_eq(vmt_get_memo(fx.dev, buf, 0, VMT_ACCESS_READ, &r, &h), -EINVAL);
    ck_assert_int_eq(vmt_get_memo(fx.dev, NULL, page, VMT_ACCESS_READ, &r, &h), -EINVAL);
    ck_assert_int_eq(vmt_get_memo(fx.dev, buf, page, 0x100, &r, &h), -EINVAL);
    ck_assert_int_eq(vmt_get_memo(fx.dev, (void *)(UINTPTR_MAX - 10), page, VMT_ACCESS_READ,
                                  &r, &h), -EINVAL);
    ck_assert_int_eq(vmt_flush(fx.cache), 0);
    ck_assert_int_eq(atomic_load(&fx.fake.live), 0);
    munmap(buf, 8 * page);
    fixture_close(&fx);
}
END_TEST

/* vmt_get_handle_walk gives what vmt_get_handle gives, from the index (never the memo): the
 * cached registration and its handle for a cached range, a registration for one that is not,
 * and vmt_get_handle's errors. */
START_TEST(get_handle_walk_skips_only_the_memo)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    char *buf = map_anon(8 * page);
    struct vmt_reg *r, *cached;
    void *h = NULL;

    ck_assert_int_eq(vmt_get_handle_walk(fx.dev, buf, 2 * page, VMT_ACCESS_READ, &cached, &h), 0);
    ck_assert_ptr_eq(h, vmt_reg_handle(cached));
    ck_assert_uint_eq(stats_of(fx.cache).registrations, 1);
    vmt_put(cached);
    for (int i = 0; i < 4; i++)
        (void)hit_came_from_memo(&fx, buf, page);  /* what the memo holds, if it is on */
    struct vmt_stats before = stats_of(fx.cache);
    ck_assert_int_eq(vmt_get_handle_walk(fx.dev, buf + 10, 100, VMT_ACCESS_READ, &r, &h), 0);
    ck_assert_ptr_eq(r, cached);
    ck_assert_ptr_eq(h, vmt_reg_handle(cached));
    struct vmt_stats after = stats_of(fx.cache);
    ck_assert_uint_eq(after.hits, before.hits + 1);
    ck_assert_uint_eq(after.memo_hits, before.memo_hits);  /* the index answered */
    ck_assert_uint_eq(after.registrations, before.registrations);
    vmt_put(r);
    /* more rights than cached: a registration with them, as vmt_get_handle would make */
    ck_assert_int_eq(vmt_get_handle_walk(fx.dev, buf, page, VMT_ACCESS_READ | VMT_ACCESS_WRITE,
                                         &r, &h), 0);
    ck_assert(vmt_reg_access(r) & VMT_ACCESS_WRITE);
    ck_assert_uint_eq(stats_of(fx.cache).registrations, 2);
    vmt_put(r);
    ck_assert_int_eq(vmt_get_handle_walk(fx.dev, buf, page, VMT_ACCESS_READ, &r, NULL), -EINVAL);
    ck_assert_int_eq(vmt_get_handle_walk(NULL, buf, page, VMT_ACCESS_READ, &r, &h), -EINVAL);
    ck_assert_int_eq(vmt_get_handle_walk(fx.dev, buf, page, VMT_ACCESS_READ, NULL, &h), -EINVAL);
    ck_assert_int_eq(vmt_get_handle_walk(fx.dev, (void *)(UINTPTR_MAX - 10), page,
                                         VMT_ACCESS_READ, &r, &h), -EINVAL);
    ck_assert_int_eq(vmt_flush(fx.cache), 0);
    ck_assert_int_eq(atomic_load(&fx.fake.live), 0);
    munmap(buf, 8 * page);
    fixture_close(&fx);
}
END_TEST

int main(void)
{
    const TTest *const cases[] = {hit_and_miss, index_many, get_handle_gives_the_registrations_handle,
                                  get_memo_answers_only_from_the_memo,
                                  get_handle_walk_skips_only_the_memo, NULL};
    return check_run_cases("cache lookup", 60, cases);
}
