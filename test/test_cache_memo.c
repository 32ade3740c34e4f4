/* The memo of recent lookups: it never answers with a retired registration, across the
 * wrap of the retire epoch. */
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

/* Every retirement moves the cache's retire epoch, and memo slots are valid only at the epoch
 * they were filled at. VMTRACK_TEST_EPOCH_WRAP=1 starts it 1024 retirements short of the wrap of
 * its low half, so these 3000 retirements take it across: no get may ever be answered by a retired
 * registration, before, during or after the memo is cleared. */
START_TEST(memo_never_stale_across_retirements)
{
    struct fixture fx;
    ck_assert_int_eq(setenv("VMTRACK_TEST_EPOCH_WRAP", "1", 1), 0);
    fixture_open(&fx, "none", 0);
    ck_assert_int_eq(unsetenv("VMTRACK_TEST_EPOCH_WRAP"), 0);
    char *buf = map_anon(8 * page);
    char *other = buf + 4 * page;
    for (int i = 0; i < 3000; i++) {
        struct vmt_reg *a = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
        ck_assert_int_eq(atomic_load(&fx.fake.regs), i + 1 + (i > 0));  /* a miss: registered anew */
        vmt_put(a);
        for (int k = 0; k < 3; k++) {  /* a walk of the index, then memo hits */
            struct vmt_reg *again = get_ok(fx.dev, buf + 100, 10, VMT_ACCESS_READ);
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
        ck_assert_int_eq(vmt_invalidate(fx.cache, buf, page), 0);
        ck_assert_int_eq(atomic_load(&fx.fake.deregs), i + 1);
    }
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_ge(s.memo_wraps, 1);
    ck_assert_uint_ge(s.memo_hits, 3000);
    ck_assert_uint_le(s.memo_hits, s.hits);
    ck_assert_int_eq(vmt_flush(fx.cache), 0);
    munmap(buf, 8 * page);
    fixture_close(&fx);
}
END_TEST

int main(void)
{
    const TTest *const cases[] = {memo_never_stale_across_retirements, NULL};
    return check_run_cases("cache memo", 60, cases);
}
