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

int main(void)
{
    const TTest *const cases[] = {attach_twice_shares, NULL};
    return check_run_cases("cache devices", 60, cases);
}
