/* The guarantee include/vmtrack.h gives about a device's reg (what libvmtrack-ucx relies on to
 * pass UCX's per-call arg in a thread-local): reg runs only inside a vmt_get on that device, in
 * the calling thread, with no lock of the cache held (so reg may itself vmt_get on another
 * device), and nothing else (put, invalidate, flush, eviction, detach) ever calls it. */
#define _GNU_SOURCE
#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vmtrack.h>
#include "lib/check_run.h"

static __thread struct vmt_device *t_in_get;   /* the device this thread's vmt_get is on */
static atomic_int regs, outside, wrong_dev;
static struct vmt_device *g_lower;            /* reg of "upper" takes a lower registration */

static int ctx_reg(void *ctx, void *addr, size_t len, unsigned access, void **handle)
{
    struct vmt_device **self = ctx;
    (void)access;
    atomic_fetch_add(&regs, 1);
    if (!t_in_get)
        atomic_fetch_add(&outside, 1);
    else if (t_in_get != *self)
        atomic_fetch_add(&wrong_dev, 1);
    *handle = NULL;
    if (g_lower && *self != g_lower) {
        /* no cache lock is held here: a nested vmt_get must not deadlock */
        struct vmt_device *saved = t_in_get;
        struct vmt_reg *lower = NULL;
        t_in_get = g_lower;
        int rc = vmt_get(g_lower, addr, len, VMT_ACCESS_READ, &lower);
        t_in_get = saved;
        if (rc < 0)
            return rc;
        *handle = lower;
    }
    return 0;
}

static void ctx_dereg(void *ctx, void *handle)
{
    (void)ctx;
    if (handle)
        vmt_put(handle);
}

static int get_on(struct vmt_device *d, void *addr, size_t len, struct vmt_reg **out)
{
    t_in_get = d;
    int rc = vmt_get(d, addr, len, VMT_ACCESS_READ | VMT_ACCESS_WRITE, out);
    t_in_get = NULL;
    return rc;
}

static struct vmt_cache *new_cache(void)
{
    struct vmt_cache_opts o;
    struct vmt_cache *c = NULL;
    memset(&o, 0, sizeof(o));
    o.sz = sizeof(o);
    o.tracker = "none";   /* manual: nothing here needs events; runs under sanitizers */
    o.max_entries = 4;                      /* small: the test also evicts */
    ck_assert_int_eq(vmt_cache_create(&o, &c), 0);
    return c;
}

static const struct vmt_device_ops ops = {
    .sz = sizeof(struct vmt_device_ops), .name = "ctx", .reg = ctx_reg, .dereg = ctx_dereg,
};

START_TEST(reg_only_inside_get)
{
    struct vmt_cache *c = new_cache();
    static struct vmt_device *upper, *lower;
    ck_assert_int_eq(vmt_device_attach(c, &ops, &upper, &upper), 0);
    ck_assert_int_eq(vmt_device_attach(c, &ops, &lower, &lower), 0);
    g_lower = lower;
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    char *buf = mmap(NULL, 64 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(buf, MAP_FAILED);
    memset(buf, 1, 64 * pg);
    for (int i = 0; i < 16; i++) {          /* more ranges than entries: evictions */
        struct vmt_reg *r = NULL;
        ck_assert_int_eq(get_on(upper, buf + (size_t)i * 3 * pg, pg, &r), 0);
        vmt_put(r);
    }
    struct vmt_reg *held = NULL;
    ck_assert_int_eq(get_on(upper, buf, 2 * pg, &held), 0);
    int before = atomic_load(&regs);
    vmt_put(held);
    ck_assert_int_eq(vmt_invalidate(c, buf, 64 * pg), 0);
    ck_assert_int_eq(vmt_flush(c), 0);
    ck_assert_int_eq(munmap(buf + 32 * pg, 32 * pg), 0);
    vmt_device_detach(upper);
    vmt_device_detach(lower);
    ck_assert_int_eq(atomic_load(&regs), before);  /* nothing but vmt_get registered */
    ck_assert_int_gt(before, 16);
    ck_assert_int_eq(atomic_load(&outside), 0);
    ck_assert_int_eq(atomic_load(&wrong_dev), 0);
    g_lower = NULL;
    vmt_cache_destroy(c);
}
END_TEST

struct racer {
    struct vmt_device *dev;
    char *buf;
    size_t pg;
};

static void *race(void *arg)
{
    struct racer *r = arg;
    for (int i = 0; i < 2000; i++) {
        struct vmt_reg *reg = NULL;
        if (get_on(r->dev, r->buf + (size_t)(i % 8) * 2 * r->pg, r->pg, &reg) == 0)
            vmt_put(reg);
    }
    return NULL;
}

START_TEST(reg_in_the_calling_thread)
{
    struct vmt_cache *c = new_cache();
    static struct vmt_device *dev;
    ck_assert_int_eq(vmt_device_attach(c, &ops, &dev, &dev), 0);
    size_t pg = (size_t)sysconf(_SC_PAGESIZE);
    char *buf = mmap(NULL, 16 * pg, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(buf, MAP_FAILED);
    struct racer rr = {.dev = dev, .buf = buf, .pg = pg};
    pthread_t t[3];
    for (int i = 0; i < 3; i++)
        ck_assert_int_eq(pthread_create(&t[i], NULL, race, &rr), 0);
    for (int i = 0; i < 3; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_eq(atomic_load(&outside), 0);
    ck_assert_int_eq(atomic_load(&wrong_dev), 0);
    vmt_device_detach(dev);
    vmt_cache_destroy(c);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("device reg context");
    TCase *tc = tcase_create("reg");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, reg_only_inside_get);
    tcase_add_test(tc, reg_in_the_calling_thread);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK) ? 1 : 0;
}
