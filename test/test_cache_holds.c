/* Holds and deferred deregistration: an invalidated registration is deregistered at its
 * last put, exactly once, however many holds it has and whichever thread puts it. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vmtrack.h>

#include "lib/vmt_test.h"

START_TEST(deferred_deregistration)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    char *buf = map_anon(2 * page);
    struct vmt_reg *a = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    struct vmt_reg *b = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    ck_assert_int_eq(vmt_invalidate(fx.cache, buf, page), 0);
    ck_assert_uint_eq(stats_of(fx.cache).entries, 0);
    ck_assert_int_eq(atomic_load(&fx.fake.deregs), 0);  /* held twice */
    /* The range is not found any more: a new get registers anew. */
    struct vmt_reg *c = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    ck_assert_ptr_ne(c, a);
    ck_assert_int_eq(atomic_load(&fx.fake.regs), 2);
    vmt_put(a);
    ck_assert_int_eq(atomic_load(&fx.fake.deregs), 0);
    vmt_put(b);
    ck_assert_int_eq(atomic_load(&fx.fake.deregs), 1);  /* at the last put */
    ck_assert_uint_ge(stats_of(fx.cache).deferred, 1);
    vmt_put(c);
    ck_assert_int_eq(vmt_flush(fx.cache), 0);
    ck_assert_int_eq(atomic_load(&fx.fake.live), 0);
    munmap(buf, 2 * page);
    fixture_close(&fx);
}
END_TEST

/* One thread holding one registration many times over: more holds than one per-thread slot
 * counts, more slots than a lookup probes, and the shared counter; all must be released before
 * an invalidated registration is deregistered, and then exactly once. */
START_TEST(many_holds_of_one_registration)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    char *buf = map_anon(2 * page);
    enum { kHolds = 100 };
    struct vmt_reg *held[kHolds];
    for (int i = 0; i < kHolds; i++) {
        held[i] = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
        ck_assert_ptr_eq(held[i], held[0]);
    }
    ck_assert_int_eq(vmt_invalidate(fx.cache, buf, page), 0);
    for (int i = 0; i < kHolds - 1; i++) {
        vmt_put(held[i]);
        ck_assert_int_eq(atomic_load(&fx.fake.deregs), 0);
    }
    vmt_put(held[kHolds - 1]);
    ck_assert_int_eq(atomic_load(&fx.fake.deregs), 1);
    ck_assert_int_eq(atomic_load(&fx.fake.regs), 1);
    munmap(buf, 2 * page);
    fixture_close(&fx);
}
END_TEST

struct cross_arg {
    struct vmt_reg *reg;
};
static void *put_in_thread(void *p)
{
    vmt_put(((struct cross_arg *)p)->reg);
    return NULL;
}

START_TEST(put_from_another_thread)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    char *buf = map_anon(2 * page);
    struct cross_arg arg = {get_ok(fx.dev, buf, page, VMT_ACCESS_READ)};
    ck_assert_int_eq(vmt_invalidate(fx.cache, buf, page), 0);
    ck_assert_int_eq(atomic_load(&fx.fake.deregs), 0);
    pthread_t t;
    pthread_create(&t, NULL, put_in_thread, &arg);
    pthread_join(t, NULL);
    ck_assert_int_eq(atomic_load(&fx.fake.deregs), 1);
    munmap(buf, 2 * page);
    fixture_close(&fx);
}
END_TEST

int main(void)
{
    const TTest *const cases[] = {
        deferred_deregistration, many_holds_of_one_registration, put_from_another_thread, NULL
    };
    return check_run_cases("cache holds", 60, cases);
}
