/* The core cache against a fake device: index, LRU, limits, merge, upgrade, deferred
 * deregistration, errors, fork, subscribers, threads. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <signal.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/wait.h>
#include <unistd.h>

#include <vmtrack.h>

#include "fake_device.h"
#include "check_run.h"

static size_t page;

static struct vmt_cache *make_cache(const char *tracker, size_t max_entries, size_t max_bytes,
                                    unsigned flags)
{
    struct vmt_cache_opts o;
    memset(&o, 0, sizeof o);
    o.sz = sizeof o;
    o.tracker = tracker;
    o.max_entries = max_entries;
    o.max_bytes = max_bytes;
    o.flags = flags;
    struct vmt_cache *c = NULL;
    ck_assert_int_eq(vmt_cache_create(&o, &c), 0);
    ck_assert_ptr_nonnull(c);
    return c;
}

static struct vmt_stats stats_of(struct vmt_cache *c)
{
    struct vmt_stats s;
    memset(&s, 0, sizeof s);
    s.sz = sizeof s;
    ck_assert_int_eq(vmt_stats_get(c, &s), 0);
    return s;
}

static char *map_pages(size_t n)
{
    char *p = mmap(NULL, n * page, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    return p;
}

struct fixture {
    struct vmt_cache *cache;
    struct fake_device fake;
    struct vmt_device *dev;
};

static void fixture_open(struct fixture *fx, const char *tracker, size_t max_entries,
                         size_t max_bytes, unsigned flags, size_t max_regions)
{
    fx->cache = make_cache(tracker, max_entries, max_bytes, flags);
    fake_init(&fx->fake, max_regions);
    ck_assert_int_eq(vmt_device_attach(fx->cache, &fx->fake.ops, &fx->fake, &fx->dev), 0);
}

static void fixture_close(struct fixture *fx)
{
    vmt_device_detach(fx->dev);
    vmt_cache_destroy(fx->cache);
    ck_assert_int_eq(atomic_load(&fx->fake.live), 0);
}

static struct vmt_reg *get_ok(struct vmt_device *dev, const void *addr, size_t len, unsigned access)
{
    struct vmt_reg *r = NULL;
    int rc = vmt_get(dev, addr, len, access, &r);
    ck_assert_msg(rc == 0, "vmt_get(%p, %zu) = %d", addr, len, rc);
    ck_assert_ptr_nonnull(r);
    return r;
}

START_TEST(bad_input)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0, 0, 0, 0);
    char *buf = map_pages(2);
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
    char *two = map_pages(2);
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

START_TEST(hit_and_miss)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0, 0, 0, 0);
    ck_assert_str_eq(vmt_cache_tracker(fx.cache), "none");
    char *buf = map_pages(4);
    struct vmt_reg *a = get_ok(fx.dev, buf + 100, 2 * page, VMT_ACCESS_READ);
    ck_assert_ptr_eq(vmt_reg_addr(a), buf);  /* page aligned */
    ck_assert_uint_eq(vmt_reg_len(a), 3 * page);
    struct fake_reg *h = vmt_reg_handle(a);
    ck_assert_ptr_eq(h->addr, buf);
    ck_assert_uint_eq(h->len, 3 * page);
    struct vmt_reg *b = get_ok(fx.dev, buf + page, 10, VMT_ACCESS_READ);
    ck_assert_ptr_eq(a, b);
    vmt_put(a);
    vmt_put(b);
    struct vmt_reg *c = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    ck_assert_ptr_eq(c, a);
    vmt_put(c);
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_eq(s.registrations, 1);
    ck_assert_uint_eq(s.misses, 1);
    ck_assert_uint_eq(s.hits, 2);
    ck_assert_uint_eq(s.entries, 1);
    ck_assert_uint_eq(s.bytes_registered, 3 * page);
    /* A range past the entry misses and (merging) registers the union. */
    struct vmt_reg *d = get_ok(fx.dev, buf + 3 * page, page, VMT_ACCESS_READ);
    ck_assert_ptr_eq(vmt_reg_addr(d), buf);
    ck_assert_uint_eq(vmt_reg_len(d), 4 * page);
    vmt_put(d);
    s = stats_of(fx.cache);
    ck_assert_uint_eq(s.merges, 1);
    ck_assert_uint_eq(s.entries, 1);
    ck_assert_int_eq(vmt_flush(fx.cache), 0);
    ck_assert_int_eq(atomic_load(&fx.fake.live), 0);
    munmap(buf, 4 * page);
    fixture_close(&fx);
}
END_TEST

/* Many disjoint ranges hit at random: the index finds each, before and after removals. */
START_TEST(index_many)
{
    enum { N = 3000 };
    struct fixture fx;
    fixture_open(&fx, "none", 0, 0, 0, 0);
    char *base = map_pages(2 * N);
    struct vmt_reg *regs[N];
    unsigned order[N];
    for (unsigned i = 0; i < N; i++)
        order[i] = i;
    srand(7);
    for (unsigned i = N - 1; i > 0; i--) {
        unsigned j = (unsigned)rand() % (i + 1), t = order[i];
        order[i] = order[j];
        order[j] = t;
    }
    for (unsigned k = 0; k < N; k++) {
        unsigned i = order[k];
        regs[i] = get_ok(fx.dev, base + 2 * i * page, page, VMT_ACCESS_READ);
        ck_assert_ptr_eq(vmt_reg_addr(regs[i]), base + 2 * i * page);
        vmt_put(regs[i]);
    }
    ck_assert_uint_eq(stats_of(fx.cache).entries, N);
    for (unsigned k = 0; k < N; k++) {
        unsigned i = order[(k * 7919) % N];
        struct vmt_reg *r = get_ok(fx.dev, base + 2 * i * page + 5, 10, VMT_ACCESS_READ);
        ck_assert_ptr_eq(r, regs[i]);
        vmt_put(r);
    }
    ck_assert_uint_eq(stats_of(fx.cache).registrations, N);
    /* Drop every third range; the others still hit, the dropped ones register again. */
    for (unsigned i = 0; i < N; i += 3)
        ck_assert_int_eq(vmt_invalidate(fx.cache, base + 2 * i * page, page), 0);
    ck_assert_uint_eq(stats_of(fx.cache).entries, N - (N + 2) / 3);
    for (unsigned i = 0; i < N; i++) {
        struct vmt_reg *r = get_ok(fx.dev, base + 2 * i * page, page, VMT_ACCESS_READ);
        if (i % 3)
            ck_assert_ptr_eq(r, regs[i]);
        ck_assert_ptr_eq(vmt_reg_addr(r), base + 2 * i * page);
        vmt_put(r);
    }
    ck_assert_uint_eq(stats_of(fx.cache).registrations, N + (N + 2) / 3);
    ck_assert_uint_eq(atomic_load(&fx.fake.deregs), (N + 2) / 3);
    munmap(base, 2 * N * page);
    fixture_close(&fx);
}
END_TEST

START_TEST(lru_by_entries)
{
    struct fixture fx;
    fixture_open(&fx, "none", 4, 0, 0, 0);
    char *base = map_pages(16);
    struct vmt_reg *r[5];
    for (int i = 0; i < 4; i++) {
        r[i] = get_ok(fx.dev, base + 2 * i * page, page, VMT_ACCESS_READ);
        vmt_put(r[i]);
    }
    /* Use the oldest; the next insertion must evict the least recently used: #1. */
    vmt_put(get_ok(fx.dev, base, page, VMT_ACCESS_READ));
    r[4] = get_ok(fx.dev, base + 8 * page, page, VMT_ACCESS_READ);
    vmt_put(r[4]);
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_eq(s.evictions, 1);
    ck_assert_uint_eq(s.entries, 4);
    long regs_before = atomic_load(&fx.fake.regs);
    vmt_put(get_ok(fx.dev, base, page, VMT_ACCESS_READ));            /* #0: still cached */
    ck_assert_int_eq(atomic_load(&fx.fake.regs), regs_before);
    vmt_put(get_ok(fx.dev, base + 2 * page, page, VMT_ACCESS_READ)); /* #1: evicted */
    ck_assert_int_eq(atomic_load(&fx.fake.regs), regs_before + 1);
    ck_assert_int_le(atomic_load(&fx.fake.live), 4);
    munmap(base, 16 * page);
    fixture_close(&fx);
}
END_TEST

START_TEST(limits_bytes_and_device)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0, 3 * page, 0, 0);
    char *base = map_pages(16);
    for (int i = 0; i < 6; i++)
        vmt_put(get_ok(fx.dev, base + 2 * i * page, page, VMT_ACCESS_READ));
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_le(s.entries, 3);
    ck_assert_uint_ge(s.evictions, 3);
    ck_assert_int_le(atomic_load(&fx.fake.live), 3);
    fixture_close(&fx);

    /* The device's own region limit. */
    fixture_open(&fx, "none", 0, 0, 0, 2);
    for (int i = 0; i < 6; i++) {
        vmt_put(get_ok(fx.dev, base + 2 * i * page, page, VMT_ACCESS_READ));
        ck_assert_int_le(atomic_load(&fx.fake.live), 2);
    }
    fixture_close(&fx);

    /* A request larger than the device registers at once: -ENOSPC. */
    fixture_open(&fx, "none", 0, 0, 0, 0);
    struct fake_device limited;
    fake_init(&limited, 0);
    limited.ops.max_region_bytes = 2 * page;
    struct vmt_device *small;
    ck_assert_int_eq(vmt_device_attach(fx.cache, &limited.ops, &limited, &small), 0);
    struct vmt_reg *r;
    ck_assert_int_eq(vmt_get(small, base, 4 * page, VMT_ACCESS_READ, &r), -ENOSPC);
    ck_assert_int_eq(atomic_load(&limited.regs), 0);
    vmt_put(get_ok(small, base, 2 * page, VMT_ACCESS_READ));
    vmt_device_detach(small);
    ck_assert_int_eq(atomic_load(&limited.live), 0);
    munmap(base, 16 * page);
    fixture_close(&fx);
}
END_TEST

START_TEST(evict_and_retry)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0, 0, 0, 0);
    fx.fake.max_live = 2;  /* the device itself says -ENOSPC past two */
    char *base = map_pages(8);
    vmt_put(get_ok(fx.dev, base, page, VMT_ACCESS_READ));
    vmt_put(get_ok(fx.dev, base + 2 * page, page, VMT_ACCESS_READ));
    struct vmt_reg *c = get_ok(fx.dev, base + 4 * page, page, VMT_ACCESS_READ);
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_eq(s.retries, 1);
    ck_assert_uint_ge(s.evictions, 1);
    /* Everything held: eviction frees nothing, so -ENOSPC. */
    struct vmt_reg *d = get_ok(fx.dev, base + 2 * page, page, VMT_ACCESS_READ);
    struct vmt_reg *e = NULL;
    ck_assert_int_eq(vmt_get(fx.dev, base + 6 * page, page, VMT_ACCESS_READ, &e), -ENOSPC);
    vmt_put(c);
    vmt_put(d);
    /* A device error that is not about space is returned as it is, once. */
    atomic_store(&fx.fake.fail_next, -EPERM);
    atomic_store(&fx.fake.fail_count, 1);
    ck_assert_int_eq(vmt_get(fx.dev, base + 6 * page, page, VMT_ACCESS_READ, &e), -EPERM);
    munmap(base, 8 * page);
    fixture_close(&fx);
}
END_TEST

START_TEST(merge_and_no_merge)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0, 0, 0, 0);
    char *base = map_pages(8);
    vmt_put(get_ok(fx.dev, base, page, VMT_ACCESS_READ));
    vmt_put(get_ok(fx.dev, base + 2 * page, page, VMT_ACCESS_READ));
    /* Touches both: one registration of the union replaces them. */
    struct vmt_reg *u = get_ok(fx.dev, base + page, page, VMT_ACCESS_READ);
    ck_assert_ptr_eq(vmt_reg_addr(u), base);
    ck_assert_uint_eq(vmt_reg_len(u), 3 * page);
    vmt_put(u);
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_eq(s.entries, 1);
    ck_assert_uint_eq(s.merges, 1);
    ck_assert_int_eq(atomic_load(&fx.fake.live), 1);
    /* A union keeps the rights of what it absorbed: READ on #0, WRITE on #1 touching it, then
     * READ on #0 again is a hit on the union. */
    vmt_flush(fx.cache);
    long before = atomic_load(&fx.fake.regs);
    vmt_put(get_ok(fx.dev, base, page, VMT_ACCESS_READ));
    struct vmt_reg *rw = get_ok(fx.dev, base + page, page, VMT_ACCESS_WRITE);
    ck_assert_uint_eq(vmt_reg_access(rw), VMT_ACCESS_READ | VMT_ACCESS_WRITE);
    vmt_put(rw);
    vmt_put(get_ok(fx.dev, base, page, VMT_ACCESS_READ));
    ck_assert_int_eq(atomic_load(&fx.fake.regs), before + 2);
    /* The union is not merged across a hole. */
    munmap(base + 4 * page, page);
    struct vmt_reg *v = get_ok(fx.dev, base + 5 * page, page, VMT_ACCESS_READ);
    ck_assert_ptr_eq(vmt_reg_addr(v), base + 5 * page);
    vmt_put(v);
    ck_assert_uint_eq(stats_of(fx.cache).entries, 2);
    fixture_close(&fx);

    fixture_open(&fx, "none", 0, 0, VMT_CACHE_NO_MERGE, 0);
    vmt_put(get_ok(fx.dev, base, page, VMT_ACCESS_READ));
    struct vmt_reg *w = get_ok(fx.dev, base + page, page, VMT_ACCESS_READ);
    ck_assert_ptr_eq(vmt_reg_addr(w), base + page);
    ck_assert_uint_eq(vmt_reg_len(w), page);
    vmt_put(w);
    ck_assert_uint_eq(stats_of(fx.cache).entries, 2);
    ck_assert_uint_eq(stats_of(fx.cache).merges, 0);
    munmap(base, 4 * page);
    munmap(base + 5 * page, 3 * page);
    fixture_close(&fx);
}
END_TEST

START_TEST(access_upgrade)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0, 0, 0, 0);
    char *buf = map_pages(2);
    struct vmt_reg *ro = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    struct vmt_reg *rw = get_ok(fx.dev, buf, page, VMT_ACCESS_WRITE);
    ck_assert_ptr_ne(ro, rw);
    ck_assert_uint_eq(vmt_reg_access(rw), VMT_ACCESS_READ | VMT_ACCESS_WRITE);
    ck_assert_uint_eq(((struct fake_reg *)vmt_reg_handle(rw))->access, VMT_ACCESS_READ | VMT_ACCESS_WRITE);
    /* The old one is still held: still registered until its put. */
    ck_assert_int_eq(atomic_load(&fx.fake.live), 2);
    ck_assert_int_eq(atomic_load(&fx.fake.deregs), 0);
    vmt_put(ro);
    ck_assert_int_eq(atomic_load(&fx.fake.deregs), 1);
    /* Reads now hit the upgraded registration. */
    struct vmt_reg *again = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    ck_assert_ptr_eq(again, rw);
    vmt_put(again);
    vmt_put(rw);
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_eq(s.upgrades, 1);
    ck_assert_uint_eq(s.registrations, 2);
    munmap(buf, 2 * page);
    fixture_close(&fx);
}
END_TEST

START_TEST(deferred_deregistration)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0, 0, 0, 0);
    char *buf = map_pages(2);
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

/* Every retirement moves the cache's retire epoch, and memo slots are valid only at the epoch
 * they were filled at. The epoch starts 1024 retirements short of the wrap of its low half, so
 * these 3000 retirements take it across: no get may ever be answered by a retired
 * registration, before, during or after the memo is cleared. */
START_TEST(memo_never_stale_across_retirements)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0, 0, 0, 0);
    char *buf = map_pages(8);
    char *other = buf + 4 * page;
    for (int i = 0; i < 3000; i++) {
        struct vmt_reg *a = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
        ck_assert_int_eq(atomic_load(&fx.fake.regs), i + 1 + (i > 0));  /* a miss: registered anew */
        vmt_put(a);
        for (int k = 0; k < 3; k++) {  /* a walk of the index, then memo hits */
            struct vmt_reg *again = get_ok(fx.dev, buf + 100, 10, VMT_ACCESS_READ);
            ck_assert_ptr_eq(again, a);
            struct fake_reg *h = vmt_reg_handle(again);
            ck_assert_int_eq(h->live, 1);
            ck_assert_ptr_eq(h->addr, buf);
            vmt_put(again);
        }
        /* Another range stays cached all along: its memo slot must keep answering right. */
        struct vmt_reg *b = get_ok(fx.dev, other, page, VMT_ACCESS_READ);
        struct fake_reg *hb = vmt_reg_handle(b);
        ck_assert_int_eq(hb->live, 1);
        ck_assert_ptr_eq(hb->addr, other);
        vmt_put(b);
        ck_assert_int_eq(vmt_invalidate(fx.cache, buf, page), 0);
        ck_assert_int_eq(atomic_load(&fx.fake.deregs), i + 1);
    }
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_ge(s.memo_wraps, 1);
    ck_assert_uint_ge(s.memo_hits, 3000);
    ck_assert_uint_le(s.memo_hits, s.hits);
    ck_assert_int_eq(vmt_flush(fx.cache), 0);
    munmap(buf, 8 * page);
    fixture_close(&fx);
}
END_TEST

/* One thread holding one registration many times over: more holds than one per-thread slot
 * counts, more slots than a lookup probes, and the shared counter; all must be released before
 * an invalidated registration is deregistered, and then exactly once. */
START_TEST(many_holds_of_one_registration)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0, 0, 0, 0);
    char *buf = map_pages(2);
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
    fixture_open(&fx, "none", 0, 0, 0, 0);
    char *buf = map_pages(2);
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

/* Misuse: the message always, and in --enable-debug builds an abort. Run in a child. */
static int child_status(void (*fn)(void))
{
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        fn();
        _exit(0);
    }
    int st = 0;
    waitpid(pid, &st, 0);
    return st;
}

static void double_put(void)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0, 0, 0, 0);
    char *buf = map_pages(1);
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
    fixture_open(&fx, "none", 0, 0, 0, 0);
    char *buf = map_pages(1);
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
    fixture_open(&fx, "none", 0, 0, 0, 0);
    char *buf = map_pages(1);
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
    int st = child_status(misuse);
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

START_TEST(attach_twice_shares)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0, 0, 0, 0);
    struct vmt_device *again = NULL;
    ck_assert_int_eq(vmt_device_attach(fx.cache, &fx.fake.ops, &fx.fake, &again), 0);
    ck_assert_ptr_eq(again, fx.dev);
    char *buf = map_pages(1);
    vmt_put(get_ok(fx.dev, buf, page, VMT_ACCESS_READ));
    vmt_put(get_ok(again, buf, page, VMT_ACCESS_READ));
    ck_assert_int_eq(atomic_load(&fx.fake.regs), 1);
    vmt_device_detach(again);  /* one reference left: nothing deregistered */
    ck_assert_int_eq(atomic_load(&fx.fake.live), 1);
    vmt_put(get_ok(fx.dev, buf, page, VMT_ACCESS_READ));
    ck_assert_ptr_eq(vmt_device_ctx(fx.dev), &fx.fake);
    /* A second device on the same range gets its own registration, lazily. */
    struct fake_device other;
    fake_init(&other, 0);
    struct vmt_device *od;
    ck_assert_int_eq(vmt_device_attach(fx.cache, &other.ops, &other, &od), 0);
    ck_assert_ptr_ne(od, fx.dev);
    vmt_put(get_ok(od, buf, page, VMT_ACCESS_READ));
    ck_assert_int_eq(atomic_load(&other.regs), 1);
    ck_assert_int_eq(atomic_load(&fx.fake.regs), 1);
    vmt_put(get_ok(fx.dev, buf, page, VMT_ACCESS_READ));  /* still a hit */
    ck_assert_int_eq(atomic_load(&fx.fake.regs), 1);
    vmt_device_detach(od);
    ck_assert_int_eq(atomic_load(&other.live), 0);
    munmap(buf, page);
    fixture_close(&fx);
}
END_TEST

START_TEST(fork_child_starts_empty)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0, 0, 0, 0);
    char *buf = map_pages(3);
    struct vmt_reg *held = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    vmt_put(get_ok(fx.dev, buf + 2 * page, page, VMT_ACCESS_READ));
    long deregs_before = atomic_load(&fx.fake.deregs);
    fflush(NULL);
    pid_t pid = fork();
    if (pid == 0) {
        struct vmt_reg *r;
        /* The parent's device is not the child's. */
        if (vmt_get(fx.dev, buf, page, VMT_ACCESS_READ, &r) != -ENODEV)
            _exit(10);
        struct vmt_stats s = {.sz = sizeof s};
        vmt_stats_get(fx.cache, &s);
        if (s.entries != 0)
            _exit(11);
        struct fake_device mine;
        fake_init(&mine, 0);
        struct vmt_device *d;
        if (vmt_device_attach(fx.cache, &fx.fake.ops, &fx.fake, &d) || d == fx.dev)
            _exit(12);
        if (vmt_get(d, buf, page, VMT_ACCESS_READ, &r))
            _exit(13);
        vmt_put(r);
        vmt_put(held);  /* the parent's: must not deregister it */
        vmt_flush(fx.cache);
        vmt_device_detach(d);
        /* Only the child's own registration was deregistered. */
        if (atomic_load(&fx.fake.deregs) != deregs_before + 1)
            _exit(14);
        _exit(0);
    }
    int st;
    waitpid(pid, &st, 0);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "child status %d", st);
    /* The parent's registrations keep working. */
    struct vmt_reg *again = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    ck_assert_ptr_eq(again, held);
    vmt_put(again);
    vmt_put(held);
    vmt_put(get_ok(fx.dev, buf + 2 * page, page, VMT_ACCESS_READ));
    ck_assert_int_eq(atomic_load(&fx.fake.deregs), deregs_before);
    ck_assert_uint_eq(stats_of(fx.cache).registrations, 2);
    munmap(buf, 3 * page);
    fixture_close(&fx);
}
END_TEST

struct event_log {
    int calls;
    const void *addr;
    size_t len;
};
static void on_event(void *arg, const void *addr, size_t len)
{
    struct event_log *l = arg;
    l->calls++;
    l->addr = addr;
    l->len = len;
}

START_TEST(subscribers)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0, 0, 0, 0);
    struct event_log log = {0, NULL, 0};
    ck_assert_int_eq(vmt_subscribe(fx.cache, on_event, &log), 0);
    ck_assert_int_eq(vmt_subscribe(fx.cache, on_event, &log), -EEXIST);
    ck_assert_int_eq(vmt_subscribe(fx.cache, NULL, &log), -EINVAL);
    char *buf = map_pages(1);
    ck_assert_int_eq(vmt_invalidate(fx.cache, buf, 123), 0);
    ck_assert_int_eq(log.calls, 1);
    ck_assert_ptr_eq(log.addr, buf);
    ck_assert_uint_eq(log.len, 123);
    ck_assert_int_eq(vmt_unsubscribe(fx.cache, on_event, &log), 0);
    ck_assert_int_eq(vmt_unsubscribe(fx.cache, on_event, &log), -ENOENT);
    ck_assert_int_eq(vmt_invalidate(fx.cache, buf, 123), 0);
    ck_assert_int_eq(log.calls, 1);
    ck_assert_int_eq(vmt_invalidate(fx.cache, buf, 0), -EINVAL);
    munmap(buf, page);
    fixture_close(&fx);
}
END_TEST

START_TEST(pass_mode_caches_nothing)
{
    struct fixture fx;
    fixture_open(&fx, "pass", 0, 0, 0, 0);
    ck_assert_str_eq(vmt_cache_tracker(fx.cache), "pass");
    char *buf = map_pages(1);
    struct vmt_reg *a = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    struct vmt_reg *b = get_ok(fx.dev, buf, page, VMT_ACCESS_READ);
    ck_assert_int_eq(atomic_load(&fx.fake.regs), 2);
    vmt_put(a);
    ck_assert_int_eq(atomic_load(&fx.fake.deregs), 1);
    vmt_put(b);
    ck_assert_int_eq(atomic_load(&fx.fake.deregs), 2);
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_eq(s.entries, 0);
    ck_assert_uint_eq(s.uncached, 2);
    munmap(buf, page);
    fixture_close(&fx);
}
END_TEST

static void env_child(void)
{
    setenv("VMTRACK_TRACKER", "bogus", 1);
    if (vmt_shared() != NULL || errno != EINVAL)
        _exit(1);
    _exit(0);
}
static void env_size_child(void)
{
    setenv("VMTRACK_MAX_BYTES", "12Q", 1);
    if (vmt_shared() != NULL || errno != EINVAL)
        _exit(1);
    _exit(0);
}
static void env_good_child(void)
{
    setenv("VMTRACK_TRACKER", "none", 1);
    setenv("VMTRACK_MAX_BYTES", "64M", 1);
    struct vmt_cache *c = vmt_shared();
    if (!c || vmt_shared() != c || strcmp(vmt_cache_tracker(c), "none") != 0)
        _exit(1);
    vmt_cache_destroy(c);  /* refused: the shared cache lives on */
    if (strcmp(vmt_cache_tracker(vmt_shared()), "none") != 0)
        _exit(2);
    _exit(0);
}

START_TEST(environment)
{
    int st = child_status(env_child);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "unknown tracker name must fail, status %d", st);
    st = child_status(env_size_child);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "bad size must fail, status %d", st);
    st = child_status(env_good_child);
    ck_assert_msg(WIFEXITED(st) && WEXITSTATUS(st) == 0, "good environment, status %d", st);
}
END_TEST

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
        if ((char *)vmt_reg_addr(r) > addr || (char *)vmt_reg_addr(r) + vmt_reg_len(r) < addr + page)
            abort();
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
    fixture_open(&fx, "none", 64, 0, 0, 0);
    struct stress s;
    s.dev = fx.dev;
    s.cache = fx.cache;
    s.base = map_pages(2 * STRESS_REGIONS);
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
    page = (size_t)sysconf(_SC_PAGESIZE);
    Suite *s = suite_create("cache");
    TCase *tc = tcase_create("core");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, bad_input);
    tcase_add_test(tc, hit_and_miss);
    tcase_add_test(tc, index_many);
    tcase_add_test(tc, lru_by_entries);
    tcase_add_test(tc, limits_bytes_and_device);
    tcase_add_test(tc, evict_and_retry);
    tcase_add_test(tc, merge_and_no_merge);
    tcase_add_test(tc, access_upgrade);
    tcase_add_test(tc, deferred_deregistration);
    tcase_add_test(tc, memo_never_stale_across_retirements);
    tcase_add_test(tc, many_holds_of_one_registration);
    tcase_add_test(tc, put_from_another_thread);
    tcase_add_test(tc, misuse_is_reported);
    tcase_add_test(tc, attach_twice_shares);
    tcase_add_test(tc, fork_child_starts_empty);
    tcase_add_test(tc, subscribers);
    tcase_add_test(tc, pass_mode_caches_nothing);
    tcase_add_test(tc, environment);
    suite_add_tcase(s, tc);
    TCase *stress = tcase_create("stress");
    tcase_set_timeout(stress, 60);
    tcase_add_test(stress, threads_stress);
    suite_add_tcase(s, stress);
    int failed = check_run(s, CK_FORK);
    return failed ? 1 : 0;
}
