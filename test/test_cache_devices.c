/* Devices on one cache: attaching a device twice shares one attachment; another device on
 * the same range gets its own registration, lazily. */
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

START_TEST(attach_twice_shares)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    struct vmt_device *again = NULL;
    ck_assert_int_eq(vmt_device_attach(fx.cache, &fx.fake.ops, &fx.fake, &again), 0);
    ck_assert_ptr_eq(again, fx.dev);
    char *buf = map_anon(page);
    vmt_put(get_ok(fx.dev, buf, page, VMT_ACCESS_READ));
    vmt_put(get_ok(again, buf, page, VMT_ACCESS_READ));
    ck_assert_int_eq(atomic_load(&fx.fake.regs), 1);
    vmt_device_detach(again);  /* one reference left: nothing deregistered */
    ck_assert_int_eq(atomic_load(&fx.fake.live), 1);
    vmt_put(get_ok(fx.dev, buf, page, VMT_ACCESS_READ));
    ck_assert_ptr_eq(vmt_device_ctx(fx.dev), &fx.fake);
    /* A second device on the same range gets its own registration, lazily. */
    struct fake_device other;
    fake_init(&other, 0);
    struct vmt_device *od;
    ck_assert_int_eq(vmt_device_attach(fx.cache, &other.ops, &other, &od), 0);
    ck_assert_ptr_ne(od, fx.dev);
    vmt_put(get_ok(od, buf, page, VMT_ACCESS_READ));
    ck_assert_int_eq(atomic_load(&other.regs), 1);
    ck_assert_int_eq(atomic_load(&fx.fake.regs), 1);
    vmt_put(get_ok(fx.dev, buf, page, VMT_ACCESS_READ));  /* still a hit */
    ck_assert_int_eq(atomic_load(&fx.fake.regs), 1);
    vmt_device_detach(od);
    ck_assert_int_eq(atomic_load(&other.live), 0);
    munmap(buf, page);
    fixture_close(&fx);
}
END_TEST

/* An entry counts its registrations not yet freed in 16 bits. One device keeps a range cached
 * while another registers it, invalidates that registration and keeps holding it, over and
 * over: each time the range's entry takes one more. When it has as many as it may, the next
 * get is served with a registration that is not cached (deregistered at its put), and
 * everything balances once the holds go. The bound is lowered for the test
 * (VMTRACK_TEST_ENTRY_REGS): 65535 held registrations waiting in the reclaim's list made
 * every reclaim pass look at all of them (22 s). */
START_TEST(an_entry_full_of_registrations_serves_uncached)
{
    enum { kLimit = 100, kJoins = kLimit };
    ck_assert_int_eq(setenv("VMTRACK_TEST_ENTRY_REGS", "100", 1), 0);
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    ck_assert_int_eq(unsetenv("VMTRACK_TEST_ENTRY_REGS"), 0);
    struct fake_device other;
    fake_init(&other, 0);
    struct vmt_device *od;
    ck_assert_int_eq(vmt_device_attach(fx.cache, &other.ops, &other, &od), 0);
    char *buf = map_anon(page);
    struct vmt_reg *keep = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    struct vmt_reg **held = malloc(kJoins * sizeof *held);
    ck_assert_ptr_nonnull(held);
    for (int i = 0; i < kJoins; i++) {
        held[i] = get_ok(od, buf, page, VMT_ACCESS_READ);
        ck_assert_int_eq(vmt_reg_invalidate(held[i]), 0);
    }
    /* The entry took keep's registration and kLimit - 1 of these; the last one was refused
     * (registered, then deregistered) and registered again, not cached. */
    struct vmt_stats st;
    memset(&st, 0, sizeof st);
    st.sz = sizeof st;
    ck_assert_int_eq(vmt_stats_get(fx.cache, &st), 0);
    ck_assert_uint_eq(st.uncached, 1);
    ck_assert_int_eq(atomic_load(&other.regs), kJoins + 1);
    ck_assert_int_eq(atomic_load(&other.live), kJoins);
    struct vmt_reg *more = get_ok(od, buf, page, VMT_ACCESS_READ);
    ck_assert_int_eq(vmt_stats_get(fx.cache, &st), 0);
    ck_assert_uint_eq(st.uncached, 2);
    vmt_put(more);  /* not cached: deregistered now */
    ck_assert_int_eq(atomic_load(&other.live), kJoins);
    for (int i = 0; i < kJoins; i++)
        vmt_put(held[i]);
    free(held);
    ck_assert_int_eq(atomic_load(&other.live), 0);
    /* The range is still cached for the first device, and the entry takes registrations
     * again now that they are freed. */
    vmt_put(get_ok(fx.dev, buf, page, VMT_ACCESS_READ));
    ck_assert_int_eq(atomic_load(&fx.fake.regs), 1);
    long regs = atomic_load(&other.regs);
    vmt_put(get_ok(od, buf, page, VMT_ACCESS_READ));
    vmt_put(get_ok(od, buf, page, VMT_ACCESS_READ));  /* cached this time: a hit */
    ck_assert_int_eq(atomic_load(&other.regs), regs + 1);
    ck_assert_int_eq(vmt_stats_get(fx.cache, &st), 0);
    ck_assert_uint_eq(st.uncached, 2);
    vmt_put(keep);
    vmt_device_detach(od);
    ck_assert_int_eq(atomic_load(&other.live), 0);
    munmap(buf, page);
    fixture_close(&fx);
}
END_TEST

int main(void)
{
    const TTest *const cases[] = {attach_twice_shares,
                                  an_entry_full_of_registrations_serves_uncached, NULL};
    return check_run_cases("cache devices", 60, cases);
}
