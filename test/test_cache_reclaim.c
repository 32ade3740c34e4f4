/* Reclaim in a process with more than one thread: a batch of retired registrations waits for
 * its grace period (every other thread has entered vmt_get's full path since) instead of
 * interrupting every thread with a membarrier; where another thread calls nothing, the batch
 * after two waiting ones falls back to the barrier; a hold taken before the period is never
 * deregistered under its holder; what a soft device limit evicts waits too; a fork's child
 * forgets what waits; and whatever waits goes at a flush. */
#include "config.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vmtrack.h>

#include "lib/vmt_test.h"

/* STEP_HIT's gets: a memo hit marks its entry recently used once in 16. */
enum { kCacheLimit = 4, kMainPages = 8192, kHelperPages = 64, kHitsPerStep = 16 };

/* What the second thread is asked to do, one step at a time. */
enum step { STEP_NONE, STEP_MISS, STEP_HOLD, STEP_PUT, STEP_HIT, STEP_QUIT };

struct helper {
    pthread_t tid;
    struct fixture *fx;
    char *pages;          /* its own, 2 * kHelperPages (every other one is used) */
    int used;
    char *held_at;        /* STEP_HOLD's page */
    struct vmt_reg *held;
    pthread_mutex_t mu;
    pthread_cond_t cv;
    enum step asked;
    int steps_done;
};

static void helper_miss(struct helper *h)
{
    ck_assert_int_lt(h->used, kHelperPages);
    struct vmt_reg *r = get_ok(h->fx->dev, h->pages + 2 * (size_t)h->used++ * page, page,
                               VMT_ACCESS_READ);
    vmt_put(r);
}

/* A hold taken the way a steady hit takes it: the page is registered (a miss), found by a
 * walk of the index (which memoizes it), then found in the memo, and that hold is kept. */
static void helper_hold(struct helper *h)
{
    h->held_at = h->pages + 2 * (size_t)h->used++ * page;
    for (int i = 0; i < 2; i++)
        vmt_put(get_ok(h->fx->dev, h->held_at, page, VMT_ACCESS_READ));
    h->held = get_ok(h->fx->dev, h->held_at, page, VMT_ACCESS_READ);
}

static void *helper_main(void *arg)
{
    struct helper *h = arg;
    helper_miss(h);  /* it owns a thread record from here on */
    pthread_mutex_lock(&h->mu);
    for (;;) {
        h->steps_done++;
        pthread_cond_broadcast(&h->cv);
        while (h->asked == STEP_NONE)
            pthread_cond_wait(&h->cv, &h->mu);
        enum step s = h->asked;
        h->asked = STEP_NONE;
        if (s == STEP_QUIT)
            break;
        pthread_mutex_unlock(&h->mu);
        if (s == STEP_MISS)
            helper_miss(h);
        else if (s == STEP_HOLD)
            helper_hold(h);
        else if (s == STEP_HIT)
            for (int i = 0; i < kHitsPerStep; i++)
                vmt_put(get_ok(h->fx->dev, h->held_at, page, VMT_ACCESS_READ));
        else
            vmt_put(h->held);
        pthread_mutex_lock(&h->mu);
    }
    pthread_mutex_unlock(&h->mu);
    return NULL;
}

static void helper_start(struct helper *h, struct fixture *fx)
{
    *h = (struct helper){.fx = fx, .pages = map_anon(2 * kHelperPages * page)};
    pthread_mutex_init(&h->mu, NULL);
    pthread_cond_init(&h->cv, NULL);
    ck_assert_int_eq(pthread_create(&h->tid, NULL, helper_main, h), 0);
    pthread_mutex_lock(&h->mu);
    while (h->steps_done < 1)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
}

/* Runs one step in the helper and waits until it is done. */
static void helper_do(struct helper *h, enum step s)
{
    pthread_mutex_lock(&h->mu);
    int done = h->steps_done;
    h->asked = s;
    pthread_cond_broadcast(&h->cv);
    while (s != STEP_QUIT && h->steps_done == done)
        pthread_cond_wait(&h->cv, &h->mu);
    pthread_mutex_unlock(&h->mu);
}

static void helper_stop(struct helper *h)
{
    helper_do(h, STEP_QUIT);
    pthread_join(h->tid, NULL);
    munmap(h->pages, 2 * kHelperPages * page);
}

/* The main thread's misses, each evicting one entry (the cache holds kCacheLimit), until the
 * cache has made `passes` reclaim passes. */
struct mainline {
    struct fixture *fx;
    char *pages;
    int used;
};

static struct vmt_stats miss_until_passes(struct mainline *m, uint64_t passes)
{
    struct vmt_stats st = stats_of(m->fx->cache);
    while (st.reclaim_passes < passes) {
        ck_assert_msg(m->used < kMainPages, "no reclaim pass after %d misses", m->used);
        vmt_put(get_ok(m->fx->dev, m->pages + 2 * (size_t)m->used++ * page, page,
                       VMT_ACCESS_READ));
        st = stats_of(m->fx->cache);
    }
    return st;
}

/* A test's cache (limited to `limit` entries), its main thread's misses and the helper. */
struct scene {
    struct fixture fx;
    struct mainline m;
    struct helper h;
};

static void scene_open(struct scene *sc, size_t limit)
{
    fixture_open_limited(&sc->fx, "none", limit, 0, 0, 0);
    sc->m = (struct mainline){.fx = &sc->fx, .pages = map_anon(2 * (size_t)kMainPages * page)};
    helper_start(&sc->h, &sc->fx);
}

/* Stops the helper; whatever still waits goes at the flush. */
static void scene_close(struct scene *sc)
{
    helper_stop(&sc->h);
    ck_assert_int_eq(vmt_flush(sc->fx.cache), 0);
    ck_assert_int_eq(atomic_load(&sc->fx.fake.live), 0);
    munmap(sc->m.pages, 2 * (size_t)kMainPages * page);
    fixture_close(&sc->fx);
}

START_TEST(batch_waits_for_the_other_threads_get)
{
    struct scene sc;
    scene_open(&sc, kCacheLimit);
    struct fixture *fx = &sc.fx;

    /* The first two batches wait, one in each slot: the helper has not called since. */
    struct vmt_stats st = miss_until_passes(&sc.m, 2);
    ck_assert_uint_eq(st.reclaim_barriers, 0);
    ck_assert_uint_gt(st.evictions, 0);
    ck_assert_int_eq(atomic_load(&fx->fake.deregs), 0);
    ck_assert_uint_eq(st.retired_waiting, st.evictions);

    /* The helper still calls nothing: the third batch makes the barrier, for all three. */
    st = miss_until_passes(&sc.m, 3);
    ck_assert_uint_eq(st.reclaim_barriers, 1);
    long after_barrier = atomic_load(&fx->fake.deregs);
    ck_assert_int_gt(after_barrier, 0);

    /* A batch waits again; the helper misses once; the next pass frees that batch with no
     * barrier. */
    miss_until_passes(&sc.m, 4);
    ck_assert_int_eq(atomic_load(&fx->fake.deregs), after_barrier);
    helper_do(&sc.h, STEP_MISS);
    st = miss_until_passes(&sc.m, 5);
    ck_assert_uint_eq(st.reclaim_barriers, 1);
    ck_assert_int_gt(atomic_load(&fx->fake.deregs), after_barrier);

    scene_close(&sc);  /* what still waits goes at its flush */
}
END_TEST

START_TEST(hold_from_before_the_period_is_kept)
{
    struct scene sc;
    scene_open(&sc, kCacheLimit);
    struct fixture *fx = &sc.fx;
    helper_do(&sc.h, STEP_HOLD);
    atomic_store(&fx->fake.watched, vmt_reg_handle(sc.h.held));

    /* The main thread's misses evict the held page's entry; the helper keeps calling, so
     * batches pass without a barrier, and each pass finds the hold. */
    for (uint64_t pass = 1; pass <= 6; pass++) {
        miss_until_passes(&sc.m, pass);
        helper_do(&sc.h, STEP_MISS);
        ck_assert_int_eq(atomic_load(&fx->fake.watched_deregs), 0);
    }
    struct vmt_stats st = stats_of(fx->cache);
    ck_assert_uint_ge(st.deferred, 1);  /* it was retired, and kept for its holder */
    ck_assert_uint_lt(st.reclaim_barriers, 6);

    /* Released, it is deregistered by the next reclaim that must finish. */
    helper_do(&sc.h, STEP_PUT);
    ck_assert_int_eq(vmt_flush(fx->cache), 0);
    ck_assert_int_eq(atomic_load(&fx->fake.watched_deregs), 1);
    scene_close(&sc);
}
END_TEST

/* A thread that only hits through the memo notes the period at its put (which a retirement
 * anywhere sends the slow way): the batches of a thread that misses pass without a barrier. */
START_TEST(memo_hits_let_batches_pass)
{
    struct scene sc;
    /* Room enough that the helper's page, hit once a batch, keeps its second chance. */
    scene_open(&sc, 128);
    struct fixture *fx = &sc.fx;
    helper_do(&sc.h, STEP_HOLD);
    helper_do(&sc.h, STEP_PUT);
    for (uint64_t pass = 1; pass <= 6; pass++) {
        miss_until_passes(&sc.m, pass);
        struct vmt_stats before = stats_of(fx->cache);
        helper_do(&sc.h, STEP_HIT);
        struct vmt_stats after = stats_of(fx->cache);
        ck_assert_uint_eq(after.memo_hits, before.memo_hits + kHitsPerStep);
        ck_assert_uint_eq(after.misses, before.misses);
    }
    /* The first pass parks its batch; each later one finds the period passed. */
    ck_assert_uint_eq(stats_of(fx->cache).reclaim_barriers, 0);
    scene_close(&sc);
}
END_TEST

/* A device with a soft limit (the UCX module's): in a threaded process what a miss evicts for
 * it waits for a grace period too, a pass at every such miss; it counts as gone for the limit
 * meanwhile (the device keeps exactly its limit cached, no more evicted), and the device holds
 * one registration more while the other thread keeps calling, two when it does not. */
START_TEST(soft_limit_evictions_wait_for_a_period)
{
    enum { kLimit = 4, kMisses = 40 };
    struct scene sc;
    scene_open(&sc, 0);
    struct fake_device f;
    fake_init(&f, kLimit);
    f.ops.flags = VMT_DEVICE_SOFT_LIMITS;
    struct vmt_device *dev;
    ck_assert_int_eq(vmt_device_attach(sc.fx.cache, &f.ops, &f, &dev), 0);
    char *pages = map_anon(2 * (size_t)kMisses * page);

    for (int i = 0; i < kMisses; i++) {
        vmt_put(get_ok(dev, pages + 2 * (size_t)i * page, page, VMT_ACCESS_READ));
        helper_do(&sc.h, STEP_MISS);  /* the other thread calls between two misses */
        ck_assert_int_le(atomic_load(&f.live), kLimit + 1);
    }
    ck_assert_uint_eq(stats_of(sc.fx.cache).reclaim_barriers, 0);
    /* Without the other thread's calls both waiting slots fill and the barrier serves. */
    for (int i = 0; i < kMisses; i++) {
        vmt_put(get_ok(dev, pages + 2 * (size_t)i * page, page, VMT_ACCESS_READ));
        ck_assert_int_le(atomic_load(&f.live), kLimit + 2);
    }
    ck_assert_uint_gt(stats_of(sc.fx.cache).reclaim_barriers, 0);
    /* The last kLimit pages are still cached: nothing was evicted twice over. */
    uint64_t misses = stats_of(sc.fx.cache).misses;
    for (int i = kMisses - kLimit; i < kMisses; i++)
        vmt_put(get_ok(dev, pages + 2 * (size_t)i * page, page, VMT_ACCESS_READ));
    ck_assert_uint_eq(stats_of(sc.fx.cache).misses, misses);

    vmt_device_detach(dev);
    ck_assert_int_eq(atomic_load(&f.live), 0);
    munmap(pages, 2 * (size_t)kMisses * page);
    scene_close(&sc);
}
END_TEST

/* A fork while batches wait for their grace period: the child forgets them (the parent's
 * registrations, never deregistered there), counts nothing waiting, and reclaims its own. */
START_TEST(fork_forgets_waiting_batches)
{
    struct scene sc;
    scene_open(&sc, kCacheLimit);
    struct fixture *fx = &sc.fx;
    struct vmt_stats st = miss_until_passes(&sc.m, 1);
    ck_assert_uint_gt(st.retired_waiting, 0);
    long deregs_at_fork = atomic_load(&fx->fake.deregs);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct vmt_stats cs = {.sz = sizeof cs};
        vmt_stats_get(fx->cache, &cs);
        if (cs.retired_waiting != 0)
            _exit(10);
        struct vmt_device *d;
        if (vmt_device_attach(fx->cache, &fx->fake.ops, &fx->fake, &d))
            _exit(11);
        char *page0 = map_anon(page);
        struct vmt_reg *r;
        if (vmt_get(d, page0, page, VMT_ACCESS_READ, &r))
            _exit(12);
        vmt_put(r);
        vmt_flush(fx->cache);
        vmt_device_detach(d);
        /* Its own registration went; none of the parent's waiting ones. */
        _exit(atomic_load(&fx->fake.deregs) == deregs_at_fork + 1 ? 0 : 13);
    }
    int status;
    ck_assert_int_eq(waitpid(pid, &status, 0), pid);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
    scene_close(&sc);  /* the parent's waiting batches go at its flush */
}
END_TEST

int main(void)
{
    const TTest *const cases[] = {
        batch_waits_for_the_other_threads_get, hold_from_before_the_period_is_kept,
        memo_hits_let_batches_pass, soft_limit_evictions_wait_for_a_period,
        fork_forgets_waiting_batches, NULL
    };
    return check_run_cases("cache reclaim", 60, cases);
}
