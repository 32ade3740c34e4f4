/* Lanes: a cache made of several indexes, one per group of threads. How many a cache gets;
 * that a thread finds what another registered (a granule belongs to one lane), also where a
 * range reaches past its first granule; that the limits hold for all lanes together and a
 * thread alone can use all of them; that devices with limits of their own, invalidations,
 * subscribers, detach and fork see one cache. Runs with VMTRACK_LANES=4 (set in main), so
 * that it does not depend on how many CPUs this machine has. */
#define _GNU_SOURCE
#include "config.h"

#include <check.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <signal.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vmtrack.h>

#include "lib/vmt_test.h"

enum { kLanes = 4 };
#define GRANULE (64ul << 20) /* the address space a lane owns a piece of at a time */

/* Runs fn(arg) in a new thread and waits for it: each such thread takes a new thread record,
 * whose home lane is the next one. */
static void in_thread(void *(*fn)(void *), void *arg)
{
    pthread_t t;
    ck_assert_int_eq(pthread_create(&t, NULL, fn, arg), 0);
    ck_assert_int_eq(pthread_join(t, NULL), 0);
}

/* What a thread is asked to get: `count` pages `stride` apart from `base`, each put again. */
struct gets {
    struct vmt_device *dev;
    char *base;
    size_t stride, len;
    int count;
};

static void *get_all(void *arg)
{
    struct gets *g = arg;
    for (int i = 0; i < g->count; i++)
        vmt_put(get_ok(g->dev, g->base + (size_t)i * g->stride, g->len, VMT_ACCESS_READ));
    return NULL;
}

/* A cache on the manual tracker with the fake device, limited to max_entries (0: the default)
 * and to more bytes than any test registers (the default may be the memlock limit: one lane). */
static void open_fixture(struct fixture *fx, size_t max_entries)
{
    fixture_open_limited(fx, "none", max_entries, 1ul << 40, 0, 0);
}

static struct vmt_cache *open_limited(size_t max_entries, size_t max_bytes)
{
    struct vmt_cache_opts o = {.sz = sizeof o, .tracker = "none", .max_entries = max_entries,
                               .max_bytes = max_bytes};
    struct vmt_cache *c;
    ck_assert_int_eq(vmt_cache_create(&o, &c), 0);
    return c;
}

START_TEST(lanes_follow_the_setting_and_the_limits)
{
    struct { size_t entries, bytes; uint64_t lanes; } cases[] = {
        {0, 1ul << 40, kLanes},            /* default entries: room for every lane */
        {1024, 1ul << 40, kLanes},         /* 256 entries a lane at least */
        {1023, 1ul << 40, 3},
        {256, 1ul << 40, 1},               /* one lane's worth: one list, exact LRU */
        {1u << 20, 128 * MB, 2},           /* 64 MiB a lane at least */
    };
    for (size_t i = 0; i < sizeof cases / sizeof cases[0]; i++) {
        struct vmt_cache *c = open_limited(cases[i].entries, cases[i].bytes);
        ck_assert_msg(stats_of(c).lanes == cases[i].lanes, "case %zu: %llu lanes, want %llu", i,
                      (unsigned long long)stats_of(c).lanes, (unsigned long long)cases[i].lanes);
        vmt_cache_destroy(c);
    }
    /* Unset, a cache has a lane per CPU, up to eight. */
    unsetenv("VMTRACK_LANES");
    struct vmt_cache *c = open_limited(0, 1ul << 40);
    long cpus = sysconf(_SC_NPROCESSORS_ONLN);
    uint64_t want = cpus < 1 ? 1 : cpus > 8 ? 8 : (uint64_t)cpus;
    ck_assert_uint_le(stats_of(c).lanes, want);
    ck_assert_uint_ge(stats_of(c).lanes, 1);
    vmt_cache_destroy(c);
    /* A wrong value is said and ignored, as if unset. */
    setenv("VMTRACK_LANES", "9", 1);
    c = open_limited(0, 1ul << 40);
    ck_assert_uint_le(stats_of(c).lanes, want);
    vmt_cache_destroy(c);
    setenv("VMTRACK_LANES", "4", 1);
}
END_TEST

/* Threads one after the other (each a lane of its own), each getting what the first got, and
 * then more of its own in the same granule: one registration for each buffer, whichever thread
 * asked first. */
START_TEST(threads_find_each_others_registrations)
{
    struct fixture fx;
    open_fixture(&fx, 0);
    ck_assert_uint_eq(stats_of(fx.cache).lanes, kLanes);
    char *buf = map_anon(16 * page);
    struct gets first = {fx.dev, buf, 2 * page, page, 4};
    for (int t = 0; t < kLanes + 1; t++) {
        in_thread(get_all, &first);
        ck_assert_int_eq(atomic_load(&fx.fake.regs), 4);
    }
    struct gets more = {fx.dev, buf + page, 2 * page, page, 4};  /* the pages in between */
    in_thread(get_all, &more);
    ck_assert_int_eq(atomic_load(&fx.fake.regs), 8);
    in_thread(get_all, &more);
    in_thread(get_all, &first);
    ck_assert_int_eq(atomic_load(&fx.fake.regs), 8);
    ck_assert_uint_eq(stats_of(fx.cache).misses, 8);
    ck_assert_int_eq(vmt_invalidate(fx.cache, buf, 16 * page), 0);
    ck_assert_int_eq(atomic_load(&fx.fake.live), 0);
    munmap(buf, 16 * page);
    fixture_close(&fx);
}
END_TEST

/* A range that reaches over three granules, registered by one thread: another thread's get of
 * a page in its last granule is a hit (the insert gave that granule to the range's lane). */
START_TEST(a_range_is_found_from_every_granule_it_covers)
{
    struct fixture fx;
    open_fixture(&fx, 0);
    size_t len = 3 * GRANULE;
    char *buf = map_anon(len);
    struct gets whole = {fx.dev, buf, 0, len, 1};
    in_thread(get_all, &whole);
    struct gets tail = {fx.dev, buf + len - page, 0, page, 1};
    struct gets middle = {fx.dev, buf + GRANULE + 5 * page, 0, page, 1};
    for (int t = 0; t < kLanes; t++) {
        in_thread(get_all, &tail);
        in_thread(get_all, &middle);
    }
    ck_assert_int_eq(atomic_load(&fx.fake.regs), 1);
    ck_assert_uint_eq(stats_of(fx.cache).hits, 2 * kLanes);
    munmap(buf, len);
    fixture_close(&fx);
}
END_TEST

/* Two threads at once, each missing on a mapping of its own, through a cache limited to 512
 * entries (two lanes): never more than the limit plus one entry a lane while they run, the
 * limit once they are done, and each thread's latest 200 buffers still cached (each lane
 * keeps its share, 256, rather than one thread's misses evicting the other's). */
struct racer {
    struct vmt_device *dev;
    struct vmt_cache *cache;
    char *base;
    int count;
    atomic_int *start;
    uint64_t most_entries;
};

static void *race_misses(void *arg)
{
    struct racer *r = arg;
    atomic_fetch_sub(r->start, 1);
    while (atomic_load(r->start) > 0)
        ;
    for (int i = 0; i < r->count; i++) {
        vmt_put(get_ok(r->dev, r->base + (size_t)i * 2 * page, page, VMT_ACCESS_READ));
        if (i % 64 == 0) {
            uint64_t e = stats_of(r->cache).entries;
            r->most_entries = e > r->most_entries ? e : r->most_entries;
        }
    }
    return NULL;
}

START_TEST(limits_hold_for_all_lanes_together)
{
    setenv("VMTRACK_LANES", "2", 1);
    struct fixture fx;
    open_fixture(&fx, 512);
    ck_assert_uint_eq(stats_of(fx.cache).lanes, 2);
    enum { kEach = 2000, kKept = 200 };
    const size_t span = 2 * kEach * page + GRANULE;
    atomic_int start = 2;
    struct racer r[2];
    pthread_t t[2];
    char *mapped[2];
    for (int i = 0; i < 2; i++) {
        /* Each at a granule's start, so that each thread's first get gives it its own. */
        mapped[i] = map_anon(span);
        char *base = (char *)(((uintptr_t)mapped[i] + GRANULE - 1) & ~(GRANULE - 1));
        r[i] = (struct racer){fx.dev, fx.cache, base, kEach, &start, 0};
        ck_assert_int_eq(pthread_create(&t[i], NULL, race_misses, &r[i]), 0);
    }
    for (int i = 0; i < 2; i++)
        ck_assert_int_eq(pthread_join(t[i], NULL), 0);
    for (int i = 0; i < 2; i++)
        ck_assert_uint_le(r[i].most_entries, 512 + 2);
    ck_assert_uint_le(stats_of(fx.cache).entries, 512);
    uint64_t misses = stats_of(fx.cache).misses;
    for (int i = 0; i < 2; i++) {
        struct gets latest = {fx.dev, r[i].base + (size_t)(kEach - kKept) * 2 * page,
                              2 * page, page, kKept};
        in_thread(get_all, &latest);
    }
    ck_assert_uint_eq(stats_of(fx.cache).misses, misses);
    fixture_close(&fx);
    for (int i = 0; i < 2; i++)
        munmap(mapped[i], span);
    setenv("VMTRACK_LANES", "4", 1);
}
END_TEST

/* A thread that missed 400 times, then another that missed 400 times, through a cache of
 * 512 entries and two lanes: each lane ends with its share (256), so each thread's latest 200
 * buffers still hit. One LRU list for both would have kept only the first thread's latest
 * 112; lanes that each evicted only their own, only the second's. */
START_TEST(each_lane_keeps_its_share)
{
    setenv("VMTRACK_LANES", "2", 1);
    struct fixture fx;
    open_fixture(&fx, 512);
    ck_assert_uint_eq(stats_of(fx.cache).lanes, 2);
    enum { kEach = 400, kKept = 200 };
    const size_t span = 2 * kEach * page + GRANULE;
    char *mapped[2];
    struct gets g[2];
    for (int i = 0; i < 2; i++) {
        mapped[i] = map_anon(span);
        char *base = (char *)(((uintptr_t)mapped[i] + GRANULE - 1) & ~(GRANULE - 1));
        g[i] = (struct gets){fx.dev, base, 2 * page, page, kEach};
        in_thread(get_all, &g[i]);
    }
    ck_assert_uint_eq(stats_of(fx.cache).entries, 512);
    uint64_t misses = stats_of(fx.cache).misses;
    for (int i = 0; i < 2; i++) {
        struct gets latest = {fx.dev, g[i].base + (size_t)(kEach - kKept) * 2 * page,
                              2 * page, page, kKept};
        in_thread(get_all, &latest);
        ck_assert_msg(stats_of(fx.cache).misses == misses, "thread %d's latest missed", i);
    }
    fixture_close(&fx);
    for (int i = 0; i < 2; i++)
        munmap(mapped[i], span);
    setenv("VMTRACK_LANES", "4", 1);
}
END_TEST

/* One thread alone uses the whole limit, in whichever lane: 1024 buffers through a cache of
 * 1024 entries and four lanes, all of them hit afterwards. */
START_TEST(one_thread_has_all_the_room)
{
    struct fixture fx;
    open_fixture(&fx, 1024);
    ck_assert_uint_eq(stats_of(fx.cache).lanes, kLanes);
    char *buf = map_anon(2048 * page);
    struct gets all = {fx.dev, buf, 2 * page, page, 1024};
    in_thread(get_all, &all);
    ck_assert_uint_eq(stats_of(fx.cache).entries, 1024);
    ck_assert_uint_eq(stats_of(fx.cache).evictions, 0);
    uint64_t misses = stats_of(fx.cache).misses;
    get_all(&all);
    ck_assert_uint_eq(stats_of(fx.cache).misses, misses);
    munmap(buf, 2048 * page);
    fixture_close(&fx);
}
END_TEST

/* A device with a limit of its own keeps to it whichever threads ask: all its registrations
 * are in one lane, where its evictions find them. */
START_TEST(a_device_limit_holds_across_threads)
{
    struct fixture fx;
    open_fixture(&fx, 0);
    struct fake_device f;
    fake_init(&f, 8);
    f.ops.flags = VMT_DEVICE_SOFT_LIMITS;
    struct vmt_device *dev;
    ck_assert_int_eq(vmt_device_attach(fx.cache, &f.ops, &f, &dev), 0);
    char *buf = map_anon(64 * page + 2 * GRANULE);
    for (int t = 0; t < kLanes; t++) {
        struct gets g = {dev, buf + (size_t)t * (GRANULE / 2), 2 * page, page, 8};
        in_thread(get_all, &g);
        ck_assert_int_le(atomic_load(&f.live), 8 + 1);
    }
    vmt_device_detach(dev);
    ck_assert_int_eq(atomic_load(&f.live), 0);
    munmap(buf, 64 * page + 2 * GRANULE);
    fixture_close(&fx);
}
END_TEST

static atomic_int g_events;
static void count_event(void *arg, const void *addr, size_t len)
{
    (void)arg, (void)addr, (void)len;
    atomic_fetch_add(&g_events, 1);
}

/* An invalidation reaches every lane, and a subscriber hears of it once. */
START_TEST(an_invalidation_reaches_every_lane_once)
{
    struct fixture fx;
    open_fixture(&fx, 0);
    ck_assert_int_eq(vmt_subscribe(fx.cache, count_event, NULL), 0);
    char *buf = map_anon(kLanes * GRANULE);
    for (int t = 0; t < kLanes; t++) {
        struct gets g = {fx.dev, buf + (size_t)t * GRANULE, 2 * page, page, 4};
        in_thread(get_all, &g);
    }
    ck_assert_uint_eq(stats_of(fx.cache).entries, 4 * kLanes);
    atomic_store(&g_events, 0);
    ck_assert_int_eq(vmt_invalidate(fx.cache, buf, kLanes * GRANULE), 0);
    ck_assert_int_eq(atomic_load(&g_events), 1);
    ck_assert_uint_eq(stats_of(fx.cache).entries, 0);
    ck_assert_int_eq(atomic_load(&fx.fake.live), 0);
    ck_assert_int_eq(vmt_unsubscribe(fx.cache, count_event, NULL), 0);
    munmap(buf, kLanes * GRANULE);
    fixture_close(&fx);
}
END_TEST

/* A detach deregisters the device's registrations in every lane, held ones too (said). */
START_TEST(detach_empties_every_lane)
{
    struct fixture fx;
    open_fixture(&fx, 0);
    char *buf = map_anon(kLanes * GRANULE);
    for (int t = 0; t < kLanes; t++) {
        struct gets g = {fx.dev, buf + (size_t)t * GRANULE, 2 * page, page, 4};
        in_thread(get_all, &g);
    }
    ck_assert_int_eq(atomic_load(&fx.fake.live), 4 * kLanes);
    vmt_device_detach(fx.dev);
    ck_assert_int_eq(atomic_load(&fx.fake.live), 0);
    ck_assert_uint_eq(stats_of(fx.cache).entries, 0);
    fx.dev = NULL;
    vmt_cache_destroy(fx.cache);
    munmap(buf, kLanes * GRANULE);
}
END_TEST

/* A fork's child starts with nothing in any lane, and its own device works in all of them. */
static struct vmt_cache *g_fork_cache;
static char *g_fork_buf;

static void child_uses_the_lanes(void)
{
    struct fake_device f;
    fake_init(&f, 0);
    struct vmt_device *dev;
    if (vmt_device_attach(g_fork_cache, &f.ops, &f, &dev) != 0 ||
        stats_of(g_fork_cache).entries != 0)
        _exit(2);
    for (int t = 0; t < kLanes; t++) {
        struct gets g = {dev, g_fork_buf + (size_t)t * GRANULE, 2 * page, page, 4};
        in_thread(get_all, &g);
        in_thread(get_all, &g);
    }
    if (atomic_load(&f.regs) != 4 * kLanes)
        _exit(3);
    vmt_device_detach(dev);
    _exit(atomic_load(&f.live) == 0 ? 0 : 4);
}

START_TEST(a_child_starts_empty_in_every_lane)
{
    struct fixture fx;
    open_fixture(&fx, 0);
    g_fork_cache = fx.cache;
    g_fork_buf = map_anon(kLanes * GRANULE);
    for (int t = 0; t < kLanes; t++) {
        struct gets g = {fx.dev, g_fork_buf + (size_t)t * GRANULE, 2 * page, page, 4};
        in_thread(get_all, &g);
    }
    int status = run_in_child(child_uses_the_lanes);
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status 0x%x", status);
    ck_assert_int_eq(atomic_load(&fx.fake.live), 4 * kLanes);  /* the parent's, untouched */
    munmap(g_fork_buf, kLanes * GRANULE);
    fixture_close(&fx);
}
END_TEST

/* A patcher in front of madvise that feeds the cache, as Open MPI's memory patcher feeds its
 * rcache (defined here, it is the madvise libvmtrack's calls resolve to), while g_fed is set. */
static struct vmt_cache *_Atomic g_fed;

int madvise(void *addr, size_t len, int advice)
{
    struct vmt_cache *c = atomic_load(&g_fed);
    if (c && advice == MADV_DONTNEED)
        vmt_invalidate(c, addr, len);
    return (int)syscall(SYS_madvise, addr, len, advice);
}

/* fork() with two lanes in use and such a patcher: the child's fork handler forgets each
 * lane's memo without going through it (through it, the invalidation waited for the lock of a
 * lane the handler had not released yet, and the child hung). */
START_TEST(a_fork_under_a_patcher_does_not_hang)
{
    setenv("VMTRACK_LANES", "2", 1);
    struct fixture fx;
    open_fixture(&fx, 0);
    ck_assert_uint_eq(stats_of(fx.cache).lanes, 2);
    char *buf = map_anon(2 * GRANULE);
    for (int t = 0; t < 2; t++) {
        struct gets g = {fx.dev, buf + (size_t)t * GRANULE, 2 * page, page, 4};
        in_thread(get_all, &g);
    }
    atomic_store(&g_fed, fx.cache);
    fflush(NULL);
    pid_t pid = fork();
    ck_assert_int_ge(pid, 0);
    if (pid == 0)
        _exit(stats_of(fx.cache).entries == 0 ? 0 : 2);
    atomic_store(&g_fed, NULL);
    int status = wait_child_within(pid, 20, "in vmtrack's fork handler");
    ck_assert_msg(WIFEXITED(status) && WEXITSTATUS(status) == 0, "child status %#x", status);
    munmap(buf, 2 * GRANULE);
    fixture_close(&fx);
    setenv("VMTRACK_LANES", "4", 1);
}
END_TEST

int main(void)
{
    setenv("VMTRACK_LANES", "4", 1);
    const TTest *const cases[] = {
        lanes_follow_the_setting_and_the_limits, threads_find_each_others_registrations,
        a_range_is_found_from_every_granule_it_covers, limits_hold_for_all_lanes_together,
        each_lane_keeps_its_share, one_thread_has_all_the_room, a_device_limit_holds_across_threads,
        an_invalidation_reaches_every_lane_once, detach_empties_every_lane,
        a_child_starts_empty_in_every_lane, a_fork_under_a_patcher_does_not_hang, NULL
    };
    return check_run_cases("cache lanes", 120, cases);
}
