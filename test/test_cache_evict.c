/* Limits and eviction: past max_entries the least recently used entry goes first;
 * max_bytes, the device's region limit and its largest region are kept; a device that says
 * -ENOSPC gets an eviction and one retry. */
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

START_TEST(lru_by_entries)
{
    struct fixture fx;
    fixture_open_limited(&fx, "none", 4, 0, 0, 0);
    char *base = map_anon(16 * page);
    struct vmt_reg *r[5];
    for (int i = 0; i < 4; i++) {
        r[i] = get_ok(fx.dev, base + 2 * i * page, page, VMT_ACCESS_READ);
        vmt_put(r[i]);
    }
    /* Use the oldest; the next insertion must evict the least recently used: #1. */
    vmt_put(get_ok(fx.dev, base, page, VMT_ACCESS_READ));
    r[4] = get_ok(fx.dev, base + 8 * page, page, VMT_ACCESS_READ);
    vmt_put(r[4]);
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_eq(s.evictions, 1);
    ck_assert_uint_eq(s.entries, 4);
    long regs_before = atomic_load(&fx.fake.regs);
    vmt_put(get_ok(fx.dev, base, page, VMT_ACCESS_READ));            /* #0: still cached */
    ck_assert_int_eq(atomic_load(&fx.fake.regs), regs_before);
    vmt_put(get_ok(fx.dev, base + 2 * page, page, VMT_ACCESS_READ)); /* #1: evicted */
    ck_assert_int_eq(atomic_load(&fx.fake.regs), regs_before + 1);
    ck_assert_int_le(atomic_load(&fx.fake.live), 4);
    munmap(base, 16 * page);
    fixture_close(&fx);
}
END_TEST

START_TEST(limits_bytes_and_device)
{
    struct fixture fx;
    fixture_open_limited(&fx, "none", 0, 3 * page, 0, 0);
    char *base = map_anon(16 * page);
    for (int i = 0; i < 6; i++)
        vmt_put(get_ok(fx.dev, base + 2 * i * page, page, VMT_ACCESS_READ));
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_le(s.entries, 3);
    ck_assert_uint_ge(s.evictions, 3);
    ck_assert_int_le(atomic_load(&fx.fake.live), 3);
    fixture_close(&fx);

    /* The device's own region limit. */
    fixture_open_limited(&fx, "none", 0, 0, 0, 2);
    for (int i = 0; i < 6; i++) {
        vmt_put(get_ok(fx.dev, base + 2 * i * page, page, VMT_ACCESS_READ));
        ck_assert_int_le(atomic_load(&fx.fake.live), 2);
    }
    fixture_close(&fx);

    /* A request larger than the device registers at once: -ENOSPC. */
    fixture_open(&fx, "none", 0);
    struct fake_device limited;
    fake_init(&limited, 0);
    limited.ops.max_region_bytes = 2 * page;
    struct vmt_device *small;
    ck_assert_int_eq(vmt_device_attach(fx.cache, &limited.ops, &limited, &small), 0);
    struct vmt_reg *r;
    ck_assert_int_eq(vmt_get(small, base, 4 * page, VMT_ACCESS_READ, &r), -ENOSPC);
    ck_assert_int_eq(atomic_load(&limited.regs), 0);
    vmt_put(get_ok(small, base, 2 * page, VMT_ACCESS_READ));
    vmt_device_detach(small);
    ck_assert_int_eq(atomic_load(&limited.live), 0);
    munmap(base, 16 * page);
    fixture_close(&fx);
}
END_TEST

START_TEST(evict_and_retry)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    fx.fake.max_live = 2;  /* the device itself says -ENOSPC past two */
    char *base = map_anon(8 * page);
    vmt_put(get_ok(fx.dev, base, page, VMT_ACCESS_READ));
    vmt_put(get_ok(fx.dev, base + 2 * page, page, VMT_ACCESS_READ));
    struct vmt_reg *c = get_ok(fx.dev, base + 4 * page, page, VMT_ACCESS_READ);
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_eq(s.retries, 1);
    ck_assert_uint_ge(s.evictions, 1);
    /* Everything held: eviction frees nothing, so -ENOSPC. */
    struct vmt_reg *d = get_ok(fx.dev, base + 2 * page, page, VMT_ACCESS_READ);
    struct vmt_reg *e = NULL;
    ck_assert_int_eq(vmt_get(fx.dev, base + 6 * page, page, VMT_ACCESS_READ, &e), -ENOSPC);
    vmt_put(c);
    vmt_put(d);
    /* A device error that is not about space is returned as it is, once. */
    atomic_store(&fx.fake.fail_next, -EPERM);
    atomic_store(&fx.fake.fail_count, 1);
    ck_assert_int_eq(vmt_get(fx.dev, base + 6 * page, page, VMT_ACCESS_READ, &e), -EPERM);
    munmap(base, 8 * page);
    fixture_close(&fx);
}
END_TEST

int main(void)
{
    const TTest *const cases[] = {lru_by_entries, limits_bytes_and_device, evict_and_retry, NULL};
    return check_run_cases("cache evict", 60, cases);
}
