/* A device that registers nothing but records every call, for tests of the cache itself. */
#ifndef VMTRACK_TEST_FAKE_DEVICE_H
#define VMTRACK_TEST_FAKE_DEVICE_H

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#include <vmtrack.h>

#define FAKE_MAX_LIVE 4096

struct fake_reg {
    void *addr;
    size_t len;
    unsigned access;
    int live;
};

struct fake_device {
    atomic_long regs, deregs;
    atomic_int fail_next;        /* make the next reg fail with this (negative errno) */
    atomic_int fail_count;       /* ...this many times */
    size_t max_live;             /* refuse with -ENOSPC beyond this many live registrations */
    atomic_int reg_delay_us;     /* a registration takes this long (a real device pins pages) */
    atomic_long live;
    struct vmt_device_ops ops;
};

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
    *handle = r;
    return 0;
}

static void fake_dereg_fn(void *ctx, void *handle)
{
    struct fake_device *f = (struct fake_device *)ctx;
    struct fake_reg *r = (struct fake_reg *)handle;
    if (!r->live)
        abort(); /* deregistered twice: the cache is broken */
    r->live = 0;
    free(r);
    atomic_fetch_add(&f->deregs, 1);
    atomic_fetch_sub(&f->live, 1);
}

static void fake_init(struct fake_device *f, size_t max_regions)
{
    atomic_init(&f->regs, 0);
    atomic_init(&f->deregs, 0);
    atomic_init(&f->fail_next, 0);
    atomic_init(&f->fail_count, 0);
    atomic_init(&f->live, 0);
    atomic_init(&f->reg_delay_us, 0);
    f->max_live = 0;
    memset(&f->ops, 0, sizeof f->ops);  /* fields it does not name (flags) must be 0 */
    f->ops.sz = sizeof f->ops;
    f->ops.name = "fake";
    f->ops.reg = fake_reg_fn;
    f->ops.dereg = fake_dereg_fn;
    f->ops.max_regions = max_regions;
    f->ops.max_region_bytes = 0;
}

#endif
