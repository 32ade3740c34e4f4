/* vmt_reg_invalidate (one registration out of the cache) and vmt_device_flush (one device's
 * unused registrations deregistered): the other devices' registrations of the same range stay
 * cached, and what the caller holds stays registered until its last vmt_put. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <stdatomic.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vmtrack.h>
#include "lib/check_run.h"

struct counting_dev {
    struct vmt_device *dev;
    atomic_int regs, live;
};

static int count_reg(void *ctx, void *addr, size_t len, unsigned access, void **handle)
{
    struct counting_dev *d = ctx;
    (void)addr; (void)len; (void)access;
    atomic_fetch_add(&d->regs, 1);
    atomic_fetch_add(&d->live, 1);
    *handle = d;
    return 0;
}

static void count_dereg(void *ctx, void *handle)
{
    struct counting_dev *d = ctx;
    (void)handle;
    atomic_fetch_sub(&d->live, 1);
}

static const struct vmt_device_ops count_ops = {
    .sz = sizeof(struct vmt_device_ops), .name = "count", .reg = count_reg, .dereg = count_dereg,
};

static struct vmt_cache *cache;
static struct counting_dev a, b;
static char *buf;
static size_t len;

static void setup(void)
{
    struct vmt_cache_opts o;
    memset(&o, 0, sizeof(o));
    o.sz = sizeof(o);
    o.tracker = "none";   /* manual: nothing here needs events; runs under sanitizers */
    ck_assert_int_eq(vmt_cache_create(&o, &cache), 0);
    memset(&a, 0, sizeof(a));
    memset(&b, 0, sizeof(b));
    ck_assert_int_eq(vmt_device_attach(cache, &count_ops, &a, &a.dev), 0);
    ck_assert_int_eq(vmt_device_attach(cache, &count_ops, &b, &b.dev), 0);
    len = 4 * (size_t)sysconf(_SC_PAGESIZE);
    buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(buf, MAP_FAILED);
}

static void teardown(void)
{
    vmt_device_detach(a.dev);
    vmt_device_detach(b.dev);
    vmt_cache_destroy(cache);
    munmap(buf, len);
}

static struct vmt_reg *get(struct counting_dev *d)
{
    struct vmt_reg *r = NULL;
    ck_assert_int_eq(vmt_get(d->dev, buf, len, VMT_ACCESS_READ, &r), 0);
    return r;
}

START_TEST(invalidate_one_registration)
{
    struct vmt_reg *ra = get(&a), *rb = get(&b);
    vmt_put(rb);
    ck_assert_int_eq(vmt_reg_invalidate(ra), 0);
    ck_assert_int_eq(atomic_load(&a.live), 1);          /* held: still registered */
    struct vmt_reg *ra2 = get(&a);
    ck_assert_ptr_ne(ra2, ra);                          /* out of the cache: registered anew */
    ck_assert_int_eq(atomic_load(&a.regs), 2);
    struct vmt_reg *rb2 = get(&b);
    ck_assert_ptr_eq(rb2, rb);                          /* the other device's stays cached */
    ck_assert_int_eq(atomic_load(&b.regs), 1);
    vmt_put(ra);
    ck_assert_int_eq(atomic_load(&a.live), 1);          /* the old one went at its last put */
    ck_assert_int_eq(vmt_reg_invalidate(ra2), 0);
    ck_assert_int_eq(vmt_reg_invalidate(ra2), 0);       /* twice: nothing more to do */
    vmt_put(ra2);
    ck_assert_int_eq(atomic_load(&a.live), 0);
    vmt_put(rb2);
    ck_assert_int_eq(atomic_load(&b.live), 1);
    ck_assert_int_eq(vmt_reg_invalidate(NULL), -EINVAL);
}
END_TEST

START_TEST(flush_one_device)
{
    struct vmt_reg *ra = get(&a), *rb = get(&b);
    vmt_put(ra);
    vmt_put(rb);
    char *other = buf + len / 2;
    struct vmt_reg *held = NULL;
    ck_assert_int_eq(vmt_get(a.dev, other, 1, VMT_ACCESS_READ, &held), 0);  /* a hit */
    ck_assert_int_eq(vmt_device_flush(a.dev), 0);
    ck_assert_int_eq(atomic_load(&a.live), 1);          /* only the held one is left */
    ck_assert_int_eq(atomic_load(&b.live), 1);          /* b's is untouched... */
    struct vmt_reg *rb2 = get(&b);
    ck_assert_ptr_eq(rb2, rb);                          /* ...and still cached */
    vmt_put(rb2);
    vmt_put(held);
    ck_assert_int_eq(atomic_load(&a.live), 0);
    ck_assert_int_eq(vmt_device_flush(NULL), -EINVAL);
}
END_TEST

int main(void)
{
    Suite *s = suite_create("one registration, one device");
    TCase *tc = tcase_create("maintain");
    tcase_add_checked_fixture(tc, setup, teardown);
    tcase_add_test(tc, invalidate_one_registration);
    tcase_add_test(tc, flush_one_device);
    suite_add_tcase(s, tc);
    return check_run(s, CK_FORK) ? 1 : 0;
}
