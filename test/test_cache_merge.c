/* Registrations that grow: ranges that touch merge into one registration of the union (not
 * across a hole, not with VMT_CACHE_NO_MERGE, not for a device that merges only overlaps, and
 * a neighbour that only touches the request only while it is no larger than the request), and
 * a get that asks for more rights upgrades the registration while the old one stays
 * registered until its last put. */
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

START_TEST(merge_and_no_merge)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    char *base = map_anon(8 * page);
    vmt_put(get_ok(fx.dev, base, page, VMT_ACCESS_READ));
    vmt_put(get_ok(fx.dev, base + 2 * page, page, VMT_ACCESS_READ));
    /* Touches both: one registration of the union replaces them. */
    struct vmt_reg *u = get_ok(fx.dev, base + page, page, VMT_ACCESS_READ);
    ck_assert_ptr_eq(vmt_reg_addr(u), base);
    ck_assert_uint_eq(vmt_reg_len(u), 3 * page);
    vmt_put(u);
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_eq(s.entries, 1);
    ck_assert_uint_eq(s.merges, 1);
    ck_assert_int_eq(atomic_load(&fx.fake.live), 1);
    /* A union keeps the rights of what it absorbed: READ on #0, WRITE on #1 touching it, then
     * READ on #0 again is a hit on the union. */
    vmt_flush(fx.cache);
    long before = atomic_load(&fx.fake.regs);
    vmt_put(get_ok(fx.dev, base, page, VMT_ACCESS_READ));
    struct vmt_reg *rw = get_ok(fx.dev, base + page, page, VMT_ACCESS_WRITE);
    ck_assert_uint_eq(vmt_reg_access(rw), VMT_ACCESS_READ | VMT_ACCESS_WRITE);
    vmt_put(rw);
    vmt_put(get_ok(fx.dev, base, page, VMT_ACCESS_READ));
    ck_assert_int_eq(atomic_load(&fx.fake.regs), before + 2);
    /* The union is not merged across a hole. */
    munmap(base + 4 * page, page);
    struct vmt_reg *v = get_ok(fx.dev, base + 5 * page, page, VMT_ACCESS_READ);
    ck_assert_ptr_eq(vmt_reg_addr(v), base + 5 * page);
    vmt_put(v);
    ck_assert_uint_eq(stats_of(fx.cache).entries, 2);
    fixture_close(&fx);

    fixture_open_limited(&fx, "none", 0, 0, VMT_CACHE_NO_MERGE, 0);
    vmt_put(get_ok(fx.dev, base, page, VMT_ACCESS_READ));
    struct vmt_reg *w = get_ok(fx.dev, base + page, page, VMT_ACCESS_READ);
    ck_assert_ptr_eq(vmt_reg_addr(w), base + page);
    ck_assert_uint_eq(vmt_reg_len(w), page);
    vmt_put(w);
    ck_assert_uint_eq(stats_of(fx.cache).entries, 2);
    ck_assert_uint_eq(stats_of(fx.cache).merges, 0);
    munmap(base, 4 * page);
    munmap(base + 5 * page, 3 * page);
    fixture_close(&fx);
}
END_TEST

/* A device that adds up what it was asked to register. */
static atomic_long summed_bytes, summed_live;
static int summing_reg(void *ctx, void *addr, size_t len, unsigned access, void **handle)
{
    (void)ctx;
    (void)access;
    atomic_fetch_add(&summed_bytes, (long)len);
    atomic_fetch_add(&summed_live, 1);
    *handle = addr;
    return 0;
}
static void summing_dereg(void *ctx, void *handle)
{
    (void)ctx;
    (void)handle;
    atomic_fetch_sub(&summed_live, 1);
}

/* Buffers handed out back to back, each got once (a pool's chunks, malloc's): a touching
 * neighbour is absorbed only while it is no larger than the request, so the registered bytes
 * grow with the buffers, not with their square. Each get registering the whole run before it
 * again made 256 gets of 16 pages register 128 times their bytes. */
START_TEST(back_to_back_registers_each_byte_a_few_times)
{
    struct vmt_cache *cache = cache_open("none");
    struct vmt_device_ops ops;
    device_ops_init(&ops, "summing", summing_reg, summing_dereg, 0);
    struct vmt_device *dev;
    ck_assert_int_eq(vmt_device_attach(cache, &ops, NULL, &dev), 0);
    const size_t buffers = 256, len = 16 * page;
    char *base = map_anon(buffers * len);
    for (size_t i = 0; i < buffers; i++)
        vmt_put(get_ok(dev, base + i * len, len, VMT_ACCESS_READ));
    long sum = atomic_load(&summed_bytes);
    printf("back_to_back: %zu buffers of %zu bytes registered %ld bytes (%.2fx)\n", buffers, len,
           sum, (double)sum / (double)(buffers * len));
    ck_assert_int_le(sum, (long)(3 * buffers * len));
    /* ...and every buffer is still a hit. */
    struct vmt_stats before = stats_of(cache);
    for (size_t i = 0; i < buffers; i++)
        vmt_put(get_ok(dev, base + i * len, len, VMT_ACCESS_READ));
    ck_assert_uint_eq(stats_of(cache).misses, before.misses);
    vmt_device_detach(dev);
    ck_assert_int_eq(atomic_load(&summed_live), 0);
    vmt_cache_destroy(cache);
    munmap(base, buffers * len);
}
END_TEST

/* A get of [addr, addr + len) on dev whose registration is [want, want + want_len); put. */
static void get_expecting(struct vmt_device *dev, char *addr, size_t len, char *want,
                          size_t want_len)
{
    struct vmt_reg *r = get_ok(dev, addr, len, VMT_ACCESS_READ);
    ck_assert_ptr_eq(vmt_reg_addr(r), want);
    ck_assert_uint_eq(vmt_reg_len(r), want_len);
    vmt_put(r);
}

/* VMT_DEVICE_MERGE_OVERLAPS_ONLY (the UCX module's devices): a range that only touches a
 * cached one gets an entry of its own, on the lock-free plan's path and on the locked one;
 * one that overlaps still absorbs what it overlaps, and only that. */
START_TEST(device_that_merges_only_overlaps)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    struct fake_device f;
    fake_init(&f, 0);
    f.ops.flags = VMT_DEVICE_MERGE_OVERLAPS_ONLY;
    struct vmt_device *dev;
    ck_assert_int_eq(vmt_device_attach(fx.cache, &f.ops, &f, &dev), 0);
    char *base = map_anon(8 * page);

    vmt_put(get_ok(dev, base, page, VMT_ACCESS_READ));
    vmt_put(get_ok(dev, base + 2 * page, page, VMT_ACCESS_READ));
    get_expecting(dev, base + page, page, base + page, page);  /* touches both */
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_eq(s.entries, 3);
    ck_assert_uint_eq(s.merges, 0);
    ck_assert_int_eq(atomic_load(&f.live), 3);

    /* [2, 4) covers [2, 3) and touches [1, 2): it replaces [2, 3) alone. */
    get_expecting(dev, base + 2 * page, 2 * page, base + 2 * page, 2 * page);
    ck_assert_uint_eq(stats_of(fx.cache).entries, 3);
    ck_assert_int_eq(atomic_load(&f.live), 3);
    /* [3, 6) overlaps [2, 4): the union is [2, 6), [1, 2) untouched. */
    get_expecting(dev, base + 3 * page, 3 * page, base + 2 * page, 4 * page);
    s = stats_of(fx.cache);
    ck_assert_uint_eq(s.entries, 3);
    ck_assert_uint_eq(s.merges, 1);
    ck_assert_int_eq(atomic_load(&f.live), 3);
    /* Each range is still a hit. */
    for (int i = 0; i < 6; i++)
        vmt_put(get_ok(dev, base + (size_t)i * page, page, VMT_ACCESS_READ));
    ck_assert_uint_eq(stats_of(fx.cache).misses, s.misses);

    vmt_device_detach(dev);
    ck_assert_int_eq(atomic_load(&f.live), 0);
    munmap(base, 8 * page);
    fixture_close(&fx);
}
END_TEST

START_TEST(access_upgrade)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    char *buf = map_anon(2 * page);
    struct vmt_reg *ro = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    struct vmt_reg *rw = get_ok(fx.dev, buf, page, VMT_ACCESS_WRITE);
    ck_assert_ptr_ne(ro, rw);
    ck_assert_uint_eq(vmt_reg_access(rw), VMT_ACCESS_READ | VMT_ACCESS_WRITE);
    ck_assert_uint_eq(((struct fake_reg *)vmt_reg_handle(rw))->access, VMT_ACCESS_READ | VMT_ACCESS_WRITE);
    /* The old one is still held: still registered until its put. */
    ck_assert_int_eq(atomic_load(&fx.fake.live), 2);
    ck_assert_int_eq(atomic_load(&fx.fake.deregs), 0);
    vmt_put(ro);
    ck_assert_int_eq(atomic_load(&fx.fake.deregs), 1);
    /* Reads now hit the upgraded registration. */
    struct vmt_reg *again = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    ck_assert_ptr_eq(again, rw);
    vmt_put(again);
    vmt_put(rw);
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_eq(s.upgrades, 1);
    ck_assert_uint_eq(s.registrations, 2);
    munmap(buf, 2 * page);
    fixture_close(&fx);
}
END_TEST

int main(void)
{
    const TTest *const cases[] = {merge_and_no_merge, back_to_back_registers_each_byte_a_few_times,
                                  device_that_merges_only_overlaps, access_upgrade, NULL};
    return check_run_cases("cache merge", 60, cases);
}
