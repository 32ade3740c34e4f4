/* The test library (vmt_test.h): the fake device, the fixture, what is available here. */
#define _GNU_SOURCE
#include "vmt_test.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

/* ---- the fake device ------------------------------------------------------------------- */

static int fake_reg_fn(void *ctx, void *addr, size_t len, unsigned access, void **handle)
{
    struct fake_device *f = (struct fake_device *)ctx;
    if (atomic_load(&f->fail_count) > 0) {
        atomic_fetch_sub(&f->fail_count, 1);
        return atomic_load(&f->fail_next);
    }
    if (f->max_live && (size_t)atomic_load(&f->live) >= f->max_live)
        return -ENOSPC;
    int delay_us = atomic_load(&f->reg_delay_us);
    if (delay_us > 0) {
        struct timespec ts = {0, (long)delay_us * 1000};
        nanosleep(&ts, NULL);
    }
    struct fake_reg *r = (struct fake_reg *)malloc(sizeof *r);
    if (!r)
        return -ENOMEM;
    r->addr = addr;
    r->len = len;
    r->access = access;
    r->live = 1;
    atomic_fetch_add(&f->regs, 1);
    atomic_fetch_add(&f->live, 1);
    atomic_fetch_add(&f->live_bytes, (long)len);
    *handle = r;
    return 0;
}

static void fake_dereg_fn(void *ctx, void *handle)
{
    struct fake_device *f = (struct fake_device *)ctx;
    struct fake_reg *r = (struct fake_reg *)handle;
    if (!r->live)
        abort(); /* deregistered twice: the cache is broken */
    if (handle == atomic_load(&f->watched))
        atomic_fetch_add(&f->watched_deregs, 1);
    r->live = 0;
    atomic_fetch_sub(&f->live_bytes, (long)r->len);
    free(r);
    atomic_fetch_add(&f->deregs, 1);
    atomic_fetch_sub(&f->live, 1);
}

void fake_init(struct fake_device *f, size_t max_regions)
{
    atomic_init(&f->regs, 0);
    atomic_init(&f->deregs, 0);
    atomic_init(&f->fail_next, 0);
    atomic_init(&f->fail_count, 0);
    atomic_init(&f->live, 0);
    atomic_init(&f->watched, NULL);
    atomic_init(&f->watched_deregs, 0);
    atomic_init(&f->live_bytes, 0);
    atomic_init(&f->reg_delay_us, 0);
    f->max_live = 0;
    device_ops_init(&f->ops, "fake", fake_reg_fn, fake_dereg_fn, max_regions);
}

void device_ops_init(struct vmt_device_ops *ops, const char *name,
                     int (*reg)(void *, void *, size_t, unsigned, void **),
                     void (*dereg)(void *, void *), size_t max_regions)
{
    memset(ops, 0, sizeof *ops);
    ops->sz = sizeof *ops;
    ops->name = name;
    ops->reg = reg;
    ops->dereg = dereg;
    ops->max_regions = max_regions;
}

/* ---- a cache with a fake device attached ----------------------------------------------- */

static int fixture_create(struct fixture *fx, const struct vmt_cache_opts *o, size_t max_regions)
{
    fx->cache = NULL;
    fx->dev = NULL;
    int rc = vmt_cache_create(o, &fx->cache);
    if (rc)
        return rc;
    fake_init(&fx->fake, max_regions);
    rc = vmt_device_attach(fx->cache, &fx->fake.ops, &fx->fake, &fx->dev);
    if (rc) {
        vmt_cache_destroy(fx->cache);
        fx->cache = NULL;
    }
    return rc;
}

static struct vmt_cache_opts cache_opts(const char *tracker, size_t max_entries,
                                        size_t max_bytes, unsigned flags)
{
    struct vmt_cache_opts o;
    memset(&o, 0, sizeof o);
    o.sz = sizeof o;
    o.tracker = tracker;
    o.max_entries = max_entries;
    o.max_bytes = max_bytes;
    o.flags = flags;
    return o;
}

int fixture_try_open(struct fixture *fx, const char *tracker, unsigned flags)
{
    struct vmt_cache_opts o = cache_opts(tracker, 0, 0, flags);
    return fixture_create(fx, &o, 0);
}

void fixture_open_limited(struct fixture *fx, const char *tracker, size_t max_entries,
                          size_t max_bytes, unsigned flags, size_t max_regions)
{
    struct vmt_cache_opts o = cache_opts(tracker, max_entries, max_bytes, flags);
    int rc = fixture_create(fx, &o, max_regions);
    ck_assert_msg(rc == 0, "a cache on tracker %s with a fake device: %s", tracker,
                  strerror(-rc));
    ck_assert_ptr_nonnull(fx->cache);
    ck_assert_str_eq(vmt_cache_tracker(fx->cache), tracker);
}

void fixture_open(struct fixture *fx, const char *tracker, unsigned flags)
{
    fixture_open_limited(fx, tracker, 0, 0, flags, 0);
}

void fixture_close(struct fixture *fx)
{
    vmt_device_detach(fx->dev);
    vmt_cache_destroy(fx->cache);
    ck_assert_int_eq(atomic_load(&fx->fake.live), 0);
}

struct vmt_cache *cache_open(const char *tracker)
{
    struct vmt_cache_opts o = cache_opts(tracker, 0, 0, 0);
    struct vmt_cache *c = NULL;
    int rc = vmt_cache_create(&o, &c);
    ck_assert_msg(rc == 0, "vmt_cache_create(tracker %s): %s", tracker, strerror(-rc));
    ck_assert_ptr_nonnull(c);
    return c;
}

struct vmt_stats stats_of(struct vmt_cache *c)
{
    struct vmt_stats s;
    memset(&s, 0, sizeof s);
    s.sz = sizeof s;
    ck_assert_int_eq(vmt_stats_get(c, &s), 0);
    return s;
}

struct vmt_reg *get_ok(struct vmt_device *dev, const void *addr, size_t len, unsigned access)
{
    struct vmt_reg *r = NULL;
    int rc = vmt_get(dev, addr, len, access, &r);
    ck_assert_msg(rc == 0, "vmt_get(%p, %zu) = %d", addr, len, rc);
    ck_assert_ptr_nonnull(r);
    return r;
}

void *fixture_get_put(struct fixture *fx, const void *addr, size_t len)
{
    struct vmt_reg *r = get_ok(fx->dev, addr, len, VMT_ACCESS_READ);
    void *h = vmt_reg_handle(r);
    vmt_put(r);
    return h;
}

/* ---- what is available here ------------------------------------------------------------- */

/* The errors of vmt_cache_create that mean "this tracker cannot run here" (-EBUSY: another
 * patcher owns an entry the hooks would patch); any other error is a failure. */
static int means_unavailable(int rc)
{
    return rc == -ENOTSUP || rc == -ENODEV || rc == -ENOSYS || rc == -EPERM || rc == -EACCES ||
           rc == -ENOENT || rc == -EBUSY;
}

int tracker_available(const char *tracker, char *why, size_t len)
{
    struct vmt_cache_opts o = cache_opts(tracker, 0, 0, 0);
    struct vmt_cache *c = NULL;
    int rc = vmt_cache_create(&o, &c);
    if (rc == 0) {
        vmt_cache_destroy(c);
        return 1;
    }
    snprintf(why, len, "%s%s", strerror(-rc),
             strcmp(tracker, "kmod") ? "" : " (it needs vmtrack.ko loaded: run under test/vm/run)");
    return means_unavailable(rc) ? 0 : rc;
}

int skip_unless_tracker(const char *prog, const char *tracker)
{
    char why[256];
    int rc = tracker_available(tracker, why, sizeof why);
    if (rc == 1)
        return 0;
    if (rc < 0) {
        printf("FAIL: %s: a cache on tracker %s: %s\n", prog, tracker, why);
        return 1;
    }
    return test_skip("%s: tracker %s is not available here: %s", prog, tracker, why);
}
