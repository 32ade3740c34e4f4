/* Threads get and put at random while another invalidates: no double deregistration (the
 * fake device aborts), none while held, no lost one, counts agree at the end. Half the gets
 * ask vmt_get_memo first, as the UCX module does. */
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
    atomic_long memo_answers;       /* gets vmt_get_memo answered */
};

/* A held registration must still be registered: the fake device frees a registration's
 * handle at its dereg (ASan reports the read then; otherwise it reads 0 or garbage). */
static void put_checked(struct vmt_reg *r)
{
    const struct fake_reg *f = vmt_reg_handle(r);
    if (f->live != 1) {
        fprintf(stderr, "stress: registration %p deregistered while held\n", (void *)r);
        abort();
    }
    vmt_put(r);
}

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
            put_checked(held[slot]);
            held[slot] = NULL;
        }
        struct vmt_reg *r;
        char *addr = s->base + 2 * i * page;
        int rc = -EAGAIN;
        if (rand_r(&seed) & 1) {    /* as the UCX module gets: the memo first */
            void *h = NULL;
            rc = vmt_get_memo(s->dev, addr, page, acc, &r, &h);
            if (rc == 0 && h != vmt_reg_handle(r)) {
                fprintf(stderr, "stress: vmt_get_memo gave handle %p for %p, whose is %p\n",
                        h, (void *)r, vmt_reg_handle(r));
                abort();
            }
            if (rc != 0 && rc != -EAGAIN) {
                fprintf(stderr, "stress: vmt_get_memo = %d\n", rc);
                abort();
            }
            if (rc == 0)
                atomic_fetch_add(&s->memo_answers, 1);
        }
        if (rc == -EAGAIN)
            rc = vmt_get(s->dev, addr, page, acc, &r);
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
            put_checked(held[k]);
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

/* invalidating: with the invalidator thread (every reclaim of an invalidation must finish:
 * a barrier each); without it, what the getters' misses evict is reclaimed in batches that
 * wait for their grace period. */
static void run_stress(int invalidating)
{
    struct fixture fx;
    fixture_open_limited(&fx, "none", 64, 0, 0, 0);
    struct stress s;
    s.dev = fx.dev;
    s.cache = fx.cache;
    s.base = map_anon(2 * STRESS_REGIONS * page);
    atomic_init(&s.stop, 0);
    atomic_init(&s.ops, 0);
    atomic_init(&s.memo_answers, 0);
    pthread_t t[5];
    int threads = invalidating ? 5 : 4;
    for (int i = 0; i < 4; i++)
        pthread_create(&t[i], NULL, stress_getter, &s);
    if (invalidating)
        pthread_create(&t[4], NULL, stress_invalidator, &s);
    usleep(1500 * 1000);
    atomic_store(&s.stop, 1);
    for (int i = 0; i < threads; i++)
        pthread_join(t[i], NULL);
    ck_assert_int_gt(atomic_load(&s.ops), 1000);
    ck_assert_int_eq(vmt_flush(fx.cache), 0);
    ck_assert_int_eq(atomic_load(&fx.fake.live), 0);
    struct vmt_stats st = stats_of(fx.cache);
    ck_assert_uint_eq(st.registrations, st.deregistrations);
    ck_assert_int_eq(atomic_load(&fx.fake.regs), atomic_load(&fx.fake.deregs));
    /* the memo is never filled where readers fence themselves (no membarrier) */
    if (st.memo_hits > 0)
        ck_assert_int_gt(atomic_load(&s.memo_answers), 0);
    printf("threads_stress (%s): %ld get/put pairs (%ld answered by vmt_get_memo), %llu "
           "registrations, %llu invalidations, %llu reclaim passes (%llu with a barrier)\n",
           invalidating ? "invalidating" : "evicting", atomic_load(&s.ops),
           atomic_load(&s.memo_answers),
           (unsigned long long)st.registrations,
           (unsigned long long)st.invalidations, (unsigned long long)st.reclaim_passes,
           (unsigned long long)st.reclaim_barriers);
    munmap(s.base, 2 * STRESS_REGIONS * page);
    fixture_close(&fx);
}

START_TEST(threads_stress)
{
    run_stress(1);
}
END_TEST

START_TEST(threads_stress_evicting)
{
    run_stress(0);
}
END_TEST

int main(void)
{
    const TTest *const cases[] = {threads_stress, threads_stress_evicting, NULL};
    return check_run_cases("cache threads", 60, cases);
}
