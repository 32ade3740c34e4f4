/* Wrong calls: bad arguments and unmapped memory are refused (-EINVAL, -EFAULT) with
 * nothing registered; misuse of a registration (a double put, a put after detach, a pointer
 * inside a registration) is reported, aborts in --enable-debug builds and otherwise leaves a
 * sound cache. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <signal.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vmtrack.h>

#include "lib/vmt_test.h"

START_TEST(bad_input)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    char *buf = map_anon(2 * page);
    struct vmt_reg *r = NULL;
    ck_assert_int_eq(vmt_get(fx.dev, NULL, 10, VMT_ACCESS_READ, &r), -EINVAL);
    ck_assert_int_eq(vmt_get(fx.dev, buf, 0, VMT_ACCESS_READ, &r), -EINVAL);
    ck_assert_int_eq(vmt_get(fx.dev, buf, 10, 1u << 9, &r), -EINVAL);
    ck_assert_int_eq(vmt_get(NULL, buf, 10, VMT_ACCESS_READ, &r), -EINVAL);
    ck_assert_int_eq(vmt_get(fx.dev, buf, 10, VMT_ACCESS_READ, NULL), -EINVAL);
    ck_assert_int_eq(vmt_get(fx.dev, (void *)(UINTPTR_MAX - 10), 100, VMT_ACCESS_READ, &r), -EINVAL);
    /* Unmapped memory: -EFAULT, nothing registered, nothing cached. */
    munmap(buf, 2 * page);
    ck_assert_int_eq(vmt_get(fx.dev, buf, 10, VMT_ACCESS_READ, &r), -EFAULT);
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_eq(s.entries, 0);
    ck_assert_uint_eq(s.registrations, 0);
    ck_assert_int_eq(atomic_load(&fx.fake.regs), 0);
    /* Partly mapped: -EFAULT too. */
    char *two = map_anon(2 * page);
    munmap(two + page, page);
    ck_assert_int_eq(vmt_get(fx.dev, two, 2 * page, VMT_ACCESS_READ, &r), -EFAULT);
    munmap(two, page);
    /* Bad options. */
    struct vmt_cache_opts o;
    memset(&o, 0, sizeof o);
    o.sz = sizeof o;
    o.flags = 1u << 20;
    struct vmt_cache *c = NULL;
    ck_assert_int_eq(vmt_cache_create(&o, &c), -EINVAL);
    o.flags = 0;
    o.tracker = "bogus";
    ck_assert_int_eq(vmt_cache_create(&o, &c), -EINVAL);
    struct vmt_device_ops ops;
    memset(&ops, 0, sizeof ops);
    ops.sz = sizeof ops;
    struct vmt_device *d;
    ck_assert_int_eq(vmt_device_attach(fx.cache, &ops, NULL, &d), -EINVAL);
    struct vmt_stats small;
    small.sz = 8;
    ck_assert_int_eq(vmt_stats_get(fx.cache, &small), -EINVAL);
    fixture_close(&fx);
}
END_TEST

static void double_put(void)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    char *buf = map_anon(page);
    struct vmt_reg *a = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    vmt_put(a);
    vmt_put(a);
    /* Not aborted (release build): the cache must still be sound. */
    struct vmt_reg *b = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    if (b != a)
        _exit(3);
    vmt_put(b);
    vmt_invalidate(fx.cache, buf, page);
    if (atomic_load(&fx.fake.deregs) != 1)
        _exit(4);
}

static void put_after_detach(void)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    char *buf = map_anon(page);
    struct vmt_reg *a = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    vmt_device_detach(fx.dev);
    if (atomic_load(&fx.fake.live) != 0)
        _exit(5);  /* detach deregisters even what is held */
    vmt_put(a);
    if (atomic_load(&fx.fake.deregs) != 1)
        _exit(6);
}

/* A pointer a few bytes past a held registration is not that registration: putting it must
 * not release the real hold (which would let an invalidation deregister memory in use). */
static void put_of_a_pointer_inside_a_registration(void)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    char *buf = map_anon(page);
    struct vmt_reg *a = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    struct vmt_reg *again = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    if (again != a)
        _exit(7);
    for (int off = 1; off < 8; off++)
        vmt_put((struct vmt_reg *)((char *)a + off));
    vmt_invalidate(fx.cache, buf, page);
    if (atomic_load(&fx.fake.deregs) != 0)
        _exit(8);  /* still held twice: the deregistration waits */
    vmt_put(a);
    if (atomic_load(&fx.fake.deregs) != 0)
        _exit(9);
    vmt_put(again);
    if (atomic_load(&fx.fake.deregs) != 1)
        _exit(10);
}

/* Runs `misuse` in a child: debug builds must abort there, release builds must carry on with
 * a sound cache (the child's own checks exit non-zero otherwise). */
static void assert_misuse_handled(void (*misuse)(void), const char *what)
{
    int st = run_in_child(misuse);
#ifdef VMT_DEBUG
    ck_assert_msg(WIFSIGNALED(st) && WTERMSIG(st) == SIGABRT, "%s must abort in debug builds", what);
#else
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "%s: status %d", what, st);
#endif
}

START_TEST(misuse_is_reported)
{
    assert_misuse_handled(double_put, "double put");
    assert_misuse_handled(put_after_detach, "put after detach");
    assert_misuse_handled(put_of_a_pointer_inside_a_registration, "put of a misaligned pointer");
}
END_TEST

int main(void)
{
    const TTest *const cases[] = {bad_input, misuse_is_reported, NULL};
    return check_run_cases("cache misuse", 60, cases);
}
