/* Threads get and put at random while another invalidates: no double deregistration (the
 * fake device aborts), no lost one, counts agree at the end. */
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

/* Threads get/put at random while another invalidates: no double deregistration (the fake
 * aborts), no lost one, counts agree at the end. */
enum { STRESS_REGIONS = 128 };
struct stress {
    struct vmt_device *dev;
    struct vmt_cache *cache;
    char *base;
    atomic_int stop;
    atomic_long ops;
};

static void *stress_getter(void *p)
{
    struct stress *s = p;
    unsigned seed = (unsigned)(uintptr_t)pthread_self();
    struct vmt_reg *held[4] = {NULL, NULL, NULL, NULL};
    while (!atomic_load(&s->stop)) {
        unsigned i = (unsigned)rand_r(&seed) % STRESS_REGIONS;
        unsigned slot = (unsigned)rand_r(&seed) % 4;
        unsigned acc = (rand_r(&seed) & 1) ? VMT_ACCESS_READ : VMT_ACCESS_WRITE;
        if (held[slot]) {
            vmt_put(held[slot]);
            held[slot] = NULL;
        }
        struct vmt_reg *r;
        char *addr = s->base + 2 * i * page;
        int rc = vmt_get(s->dev, addr, page, acc, &r);
        if (rc != 0) {
            fprintf(stderr, "stress: vmt_get = %d\n", rc);
            abort();
        }
        char *got = vmt_reg_addr(r);
        if (got > addr || got + vmt_reg_len(r) < addr + page) {
            fprintf(stderr, "stress: vmt_get(%p) returned %p, registered [%p, +%zu)\n",
                    (void *)addr, (void *)r, vmt_reg_addr(r), vmt_reg_len(r));
            abort();
        }
        held[slot] = r;
        atomic_fetch_add(&s->ops, 1);
    }
    for (int k = 0; k < 4; k++)
        if (held[k])
            vmt_put(held[k]);
    return NULL;
}

static void *stress_invalidator(void *p)
{
    struct stress *s = p;
    unsigned seed = 99;
    while (!atomic_load(&s->stop)) {
        unsigned i = (unsigned)rand_r(&seed) % STRESS_REGIONS;
        vmt_invalidate(s->cache, s->base + 2 * i * page, (1 + rand_r(&seed) % 3) * page);
        if (rand_r(&seed) % 64 == 0)
            vmt_flush(s->cache);
    }
    return NULL;
}

START_TEST(threads_stress)
{
    struct fixture fx;
    fixture_open_limited(&fx, "none", 64, 0, 0, 0);
    struct stress s;
    s.dev = fx.dev;
    s.cache = fx.cache;
    s.base = map_anon(2 * STRESS_REGIONS * page);
    atomic_init(&s.stop, 0);
    atomic_init(&s.ops, 0);
    pthread_t t[5];
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, stress_getter, &s);
    pthread_create(&t[4], NULL, stress_invalidator, &s);
    usleep(1500 * 1000);
    atomic_store(&s.stop, 1);
    for (int i = 0; i < 5; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_gt(atomic_load(&s.ops), 1000);
    ck_assert_int_eq(vmt_flush(fx.cache), 0);
    ck_assert_int_eq(atomic_load(&fx.fake.live), 0);
    struct vmt_stats st = stats_of(fx.cache);
    ck_assert_uint_eq(st.registrations, st.deregistrations);
    ck_assert_int_eq(atomic_load(&fx.fake.regs), atomic_load(&fx.fake.deregs));
    printf("threads_stress: %ld get/put pairs, %llu registrations, %llu invalidations\n",
           atomic_load(&s.ops), (unsigned long long)st.registrations,
           (unsigned long long)st.invalidations);
    munmap(s.base, 2 * STRESS_REGIONS * page);
    fixture_close(&fx);
}
END_TEST

int main(void)
{
    const TTest *const cases[] = {threads_stress, NULL};
    return check_run_cases("cache threads", 60, cases);
}
