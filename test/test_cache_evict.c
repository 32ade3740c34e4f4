/* Limits and eviction: past max_entries the least recently used entry goes first;
 * max_bytes, the device's region limit, its byte budget and its largest region are kept; a
 * device that says -ENOSPC gets an eviction and one retry. */
#include "config.h"

#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <vmtrack.h>

#include "lib/vmt_test.h"

START_TEST(lru_by_entries)
{
    struct fixture fx;
    fixture_open_limited(&fx, "none", 4, 0, 0, 0);
    char *base = map_anon(16 * page);
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
    /* What max_entries evicted waits for a reclaim batch (reported), as in a process with
     * more threads; the index itself is at its limit. */
    s = stats_of(fx.cache);
    ck_assert_uint_eq(s.entries, 4);
    ck_assert_int_eq(atomic_load(&fx.fake.live), 4 + (long)s.retired_waiting);
    munmap(base, 16 * page);
    fixture_close(&fx);
}
END_TEST

/* The registrations max_entries evicted wait for a batch, and never more than one: at most
 * 64 of them (or 64 MiB) are registered beyond the limit at any time, each is deregistered
 * once, and vmt_stats says how many wait. */
START_TEST(entries_evictions_wait_for_a_batch)
{
    struct fixture fx;
    fixture_open_limited(&fx, "none", 4, 0, 0, 0);
    const int regions = 300;
    char *base = map_anon(2 * regions * page);
    long most = 0;
    for (int i = 0; i < regions; i++) {
        vmt_put(get_ok(fx.dev, base + 2 * i * page, page, VMT_ACCESS_READ));
        long live = atomic_load(&fx.fake.live);
        struct vmt_stats s = stats_of(fx.cache);
        ck_assert_uint_le(s.entries, 4);
        ck_assert_int_eq(live, (long)s.entries + (long)s.retired_waiting);
        if (live > most)
            most = live;
    }
    printf("entries_evictions_wait_for_a_batch: at most %ld registered with 4 entries cached\n",
           most);
    ck_assert_int_le(most, 4 + 64);
    ck_assert_int_gt(most, 4);  /* they did wait: no reclaim per eviction */
    ck_assert_int_eq(atomic_load(&fx.fake.regs), regions);
    ck_assert_int_eq(atomic_load(&fx.fake.deregs) + atomic_load(&fx.fake.live), regions);
    /* A flush leaves nothing unheld registered, the waiting ones included. */
    ck_assert_int_eq(vmt_flush(fx.cache), 0);
    ck_assert_int_eq(atomic_load(&fx.fake.live), 0);
    munmap(base, 2 * regions * page);
    fixture_close(&fx);
}
END_TEST

/* ...but their pinned bytes still count: with max_bytes set, what waits never takes the
 * registered bytes past it. */
START_TEST(waiting_evictions_stay_within_max_bytes)
{
    struct fixture fx;
    fixture_open_limited(&fx, "none", 4, 8 * page, 0, 0);
    char *base = map_anon(400 * page);
    for (int i = 0; i < 100; i++) {
        vmt_put(get_ok(fx.dev, base + 4 * i * page, page, VMT_ACCESS_READ));
        ck_assert_int_le(atomic_load(&fx.fake.live_bytes), (long)(8 * page));
    }
    ck_assert_int_eq(atomic_load(&fx.fake.deregs) + atomic_load(&fx.fake.live), 100);
    munmap(base, 400 * page);
    fixture_close(&fx);
}
END_TEST

START_TEST(limits_bytes_and_device)
{
    struct fixture fx;
    fixture_open_limited(&fx, "none", 0, 3 * page, 0, 0);
    char *base = map_anon(16 * page);
    for (int i = 0; i < 6; i++)
        vmt_put(get_ok(fx.dev, base + 2 * i * page, page, VMT_ACCESS_READ));
    struct vmt_stats s = stats_of(fx.cache);
    ck_assert_uint_le(s.entries, 3);
    ck_assert_uint_ge(s.evictions, 3);
    ck_assert_int_le(atomic_load(&fx.fake.live), 3);
    fixture_close(&fx);

    /* The device's own region limit. */
    fixture_open_limited(&fx, "none", 0, 0, 0, 2);
    for (int i = 0; i < 6; i++) {
        vmt_put(get_ok(fx.dev, base + 2 * i * page, page, VMT_ACCESS_READ));
        ck_assert_int_le(atomic_load(&fx.fake.live), 2);
    }
    fixture_close(&fx);

    /* A request larger than the device registers at once: -ENOSPC. */
    fixture_open(&fx, "none", 0);
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

/* A device's own byte budget (max_bytes): past it, a miss of that device evicts that
 * device's least recently used registrations, never another device's; held ones stay, so
 * the device may go past it rather than fail; a caller built before the field has none. */
START_TEST(device_byte_budget)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    struct fake_device budgeted, other;
    fake_init(&budgeted, 0);
    budgeted.ops.max_bytes = 4 * page;
    fake_init(&other, 0);
    struct vmt_device *a, *b;
    ck_assert_int_eq(vmt_device_attach(fx.cache, &budgeted.ops, &budgeted, &a), 0);
    ck_assert_int_eq(vmt_device_attach(fx.cache, &other.ops, &other, &b), 0);
    char *base = map_anon(64 * page);
    vmt_put(get_ok(b, base + 40 * page, page, VMT_ACCESS_READ));
    for (int i = 0; i < 4; i++)
        vmt_put(get_ok(a, base + 2 * i * page, page, VMT_ACCESS_READ));
    ck_assert_int_eq(atomic_load(&budgeted.live_bytes), (long)(4 * page));
    /* Use the oldest; the fifth page must evict the least recently used: #1 only. */
    vmt_put(get_ok(a, base, page, VMT_ACCESS_READ));
    vmt_put(get_ok(a, base + 8 * page, page, VMT_ACCESS_READ));
    ck_assert_int_eq(atomic_load(&budgeted.live_bytes), (long)(4 * page));
    long regs = atomic_load(&budgeted.regs);
    vmt_put(get_ok(a, base, page, VMT_ACCESS_READ));               /* #0: still cached */
    ck_assert_int_eq(atomic_load(&budgeted.regs), regs);
    /* A region of 3 pages makes room for itself: the budget, not the count, decides. */
    vmt_put(get_ok(a, base + 12 * page, 3 * page, VMT_ACCESS_READ));
    ck_assert_int_le(atomic_load(&budgeted.live_bytes), (long)(4 * page));
    ck_assert_int_ge(atomic_load(&budgeted.deregs), 3);
    /* The other device's registration was never a candidate. */
    regs = atomic_load(&other.regs);
    vmt_put(get_ok(b, base + 40 * page, page, VMT_ACCESS_READ));
    ck_assert_int_eq(atomic_load(&other.regs), regs);
    ck_assert_int_eq(atomic_load(&other.deregs), 0);
    /* Held registrations stay: three of 2 pages each go past the budget, none fails. */
    struct vmt_reg *held[3];
    for (int i = 0; i < 3; i++)
        held[i] = get_ok(a, base + (20 + 3 * i) * page, 2 * page, VMT_ACCESS_READ);
    ck_assert_int_ge(atomic_load(&budgeted.live_bytes), (long)(6 * page));
    for (int i = 0; i < 3; i++)
        vmt_put(held[i]);
    /* ...and the next miss brings the device back under it. */
    vmt_put(get_ok(a, base + 32 * page, page, VMT_ACCESS_READ));
    ck_assert_int_le(atomic_load(&budgeted.live_bytes), (long)(4 * page));
    vmt_device_detach(a);
    vmt_device_detach(b);
    ck_assert_int_eq(atomic_load(&budgeted.live), 0);

    /* Built against a vmtrack.h without the field: sz ends before it, whatever follows. */
    struct fake_device old;
    fake_init(&old, 0);
    old.ops.sz = offsetof(struct vmt_device_ops, max_bytes);
    old.ops.max_bytes = page;
    struct vmt_device *o;
    ck_assert_int_eq(vmt_device_attach(fx.cache, &old.ops, &old, &o), 0);
    for (int i = 0; i < 4; i++)
        vmt_put(get_ok(o, base + 2 * i * page, page, VMT_ACCESS_READ));
    ck_assert_int_eq(atomic_load(&old.live), 4);
    ck_assert_int_eq(atomic_load(&old.deregs), 0);
    vmt_device_detach(o);
    munmap(base, 64 * page);
    fixture_close(&fx);
}
END_TEST

START_TEST(evict_and_retry)
{
    struct fixture fx;
    fixture_open(&fx, "none", 0);
    fx.fake.max_live = 2;  /* the device itself says -ENOSPC past two */
    char *base = map_anon(8 * page);
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

/* A fake device that records the most registrations it ever held at once. */
struct peak_device {
    struct fake_device fake;  /* first: the fake's own reg and dereg get this pointer */
    int (*fake_reg)(void *, void *, size_t, unsigned, void **);
    atomic_long peak;
};

static int peak_reg(void *ctx, void *addr, size_t len, unsigned access, void **handle)
{
    struct peak_device *p = (struct peak_device *)ctx;
    int rc = p->fake_reg(ctx, addr, len, access, handle);
    long live = atomic_load(&p->fake.live), peak = atomic_load(&p->peak);
    while (live > peak && !atomic_compare_exchange_weak(&p->peak, &peak, live)) {
    }
    return rc;
}

struct record_owner {
    struct vmt_device *dev;
    char *buf;
    pthread_barrier_t done;
};

/* Owns a thread record of the cache (a get and a put) until the main thread is done: the
 * cache's reader barrier is then no longer free, and a reclaim has to pay for it. */
static void *own_a_record(void *arg)
{
    struct record_owner *o = (struct record_owner *)arg;
    vmt_put(get_ok(o->dev, o->buf, page, VMT_ACCESS_READ));
    pthread_barrier_wait(&o->done);
    pthread_barrier_wait(&o->done);
    return NULL;
}

/* A device's max_regions with VMT_DEVICE_SOFT_LIMITS: the miss registers first (the device
 * holds one more for a moment), then evicts the least recently used down to the limit; without
 * it the room is made first. Either way what went is deregistered before vmt_get returns
 * where no other thread owns a record; while one does, a hard limit's still is, a soft limit's
 * waits for a grace period (test_cache_reclaim) and counts as gone meanwhile. */
START_TEST(soft_device_limits)
{
    for (int soft = 0; soft < 2; soft++) {
        struct vmt_cache *cache = cache_open("none");
        struct peak_device d;
        fake_init(&d.fake, 2);
        d.fake_reg = d.fake.ops.reg;
        d.fake.ops.reg = peak_reg;
        d.fake.ops.flags = soft ? VMT_DEVICE_SOFT_LIMITS : 0;
        atomic_init(&d.peak, 0);
        struct vmt_device *dev;
        ck_assert_int_eq(vmt_device_attach(cache, &d.fake.ops, &d, &dev), 0);
        char *base = map_anon(16 * page);
        for (int i = 0; i < 3; i++)
            vmt_put(get_ok(dev, base + 2 * i * page, page, VMT_ACCESS_READ));
        ck_assert_int_eq(atomic_load(&d.fake.live), 2);
        ck_assert_int_eq(atomic_load(&d.fake.deregs), 1);
        ck_assert_int_eq(atomic_load(&d.peak), soft ? 3 : 2);
        long regs = atomic_load(&d.fake.regs);
        vmt_put(get_ok(dev, base + 4 * page, page, VMT_ACCESS_READ));  /* the newest stayed */
        vmt_put(get_ok(dev, base + 2 * page, page, VMT_ACCESS_READ));
        ck_assert_int_eq(atomic_load(&d.fake.regs), regs);
        /* An upgrade at the limit replaces a registration: it evicts nothing else. */
        long deregs_before = atomic_load(&d.fake.deregs);
        vmt_put(get_ok(dev, base + 4 * page, page, VMT_ACCESS_READ | VMT_ACCESS_WRITE));
        ck_assert_int_eq(atomic_load(&d.fake.regs), regs + 1);
        ck_assert_int_eq(atomic_load(&d.fake.deregs), deregs_before + 1);  /* its old one */
        vmt_put(get_ok(dev, base + 2 * page, page, VMT_ACCESS_READ));       /* still cached */
        ck_assert_int_eq(atomic_load(&d.fake.regs), regs + 1);
        ck_assert_int_eq(atomic_load(&d.fake.live), 2);

        struct record_owner o;
        o.dev = dev;
        o.buf = base + 12 * page;
        ck_assert_int_eq(pthread_barrier_init(&o.done, NULL, 2), 0);
        pthread_t th;
        ck_assert_int_eq(pthread_create(&th, NULL, own_a_record, &o), 0);
        pthread_barrier_wait(&o.done);  /* its registration evicted one of ours */
        long deregs = atomic_load(&d.fake.deregs);
        vmt_put(get_ok(dev, base + 8 * page, page, VMT_ACCESS_READ));
        /* One registration went either way: with a hard limit this miss's eviction, at once;
         * with a soft one the other thread's, whose grace period its put noted, while this
         * miss's eviction waits for that thread's next call (it makes none), still
         * registered. */
        ck_assert_int_eq(atomic_load(&d.fake.deregs), deregs + 1);
        ck_assert_int_eq(atomic_load(&d.fake.live), soft ? 3 : 2);
        regs = atomic_load(&d.fake.regs);
        vmt_put(get_ok(dev, base + 8 * page, page, VMT_ACCESS_READ));  /* cached, counted */
        ck_assert_int_eq(atomic_load(&d.fake.regs), regs);
        pthread_barrier_wait(&o.done);
        pthread_join(th, NULL);
        pthread_barrier_destroy(&o.done);
        vmt_device_detach(dev);
        ck_assert_int_eq(atomic_load(&d.fake.live), 0);
        munmap(base, 16 * page);
        vmt_cache_destroy(cache);
    }
}
END_TEST

/* A soft limit makes its room after the miss inserts, and must not take the new range for it:
 * with a limit of one region whose registration was used since it was cached (its second
 * chance puts it ahead of the new one in the LRU order), the miss of another range evicts the
 * old one, and the new one stays cached. */
START_TEST(soft_limit_keeps_the_range_it_inserts)
{
    struct vmt_cache *cache = cache_open("none");
    struct fake_device f;
    fake_init(&f, 1);
    f.ops.flags = VMT_DEVICE_SOFT_LIMITS;
    struct vmt_device *dev;
    ck_assert_int_eq(vmt_device_attach(cache, &f.ops, &f, &dev), 0);
    char *base = map_anon(8 * page);
    char *old_range = base, *new_range = base + 4 * page;
    for (int i = 0; i < 40; i++)  /* a tree hit, then memo hits: recently used either way */
        vmt_put(get_ok(dev, old_range, page, VMT_ACCESS_READ));
    ck_assert_int_eq(atomic_load(&f.regs), 1);
    vmt_put(get_ok(dev, new_range, page, VMT_ACCESS_READ));
    ck_assert_int_eq(atomic_load(&f.regs), 2);
    ck_assert_int_eq(atomic_load(&f.deregs), 1);
    ck_assert_int_eq(atomic_load(&f.live), 1);
    vmt_put(get_ok(dev, new_range, page, VMT_ACCESS_READ));  /* still cached */
    ck_assert_int_eq(atomic_load(&f.regs), 2);
    vmt_put(get_ok(dev, old_range, page, VMT_ACCESS_READ));  /* the one that went */
    ck_assert_int_eq(atomic_load(&f.regs), 3);
    ck_assert_int_eq(atomic_load(&f.live), 1);
    vmt_device_detach(dev);
    ck_assert_int_eq(atomic_load(&f.live), 0);
    munmap(base, 8 * page);
    vmt_cache_destroy(cache);
}
END_TEST

/* Past a large soft limit (max_regions 320: a batch of 320 / 32 = 10), the evictions wait
 * for each other and go together at the tenth: the device holds up to 9 more meanwhile, they
 * count as gone (nothing else is evicted for them), and nothing waits once a batch went. A
 * byte limit, or a limit under 64 regions, keeps each eviction at once. */
static void soft_batch_case(size_t max_regions, size_t max_bytes, long batch)
{
    struct vmt_cache *cache = cache_open("none");
    struct fake_device f;
    fake_init(&f, max_regions);
    f.ops.flags = VMT_DEVICE_SOFT_LIMITS;
    f.ops.max_bytes = max_bytes;
    struct vmt_device *dev;
    ck_assert_int_eq(vmt_device_attach(cache, &f.ops, &f, &dev), 0);
    long n = (long)max_regions + 3 * batch;
    char *base = map_anon((size_t)n * 2 * page);
    for (long i = 0; i < n; i++) {
        vmt_put(get_ok(dev, base + 2 * i * page, page, VMT_ACCESS_READ));
        long over = i + 1 - (long)max_regions;  /* evictions so far */
        long waiting = over <= 0 ? 0 : over % batch;
        ck_assert_int_eq(atomic_load(&f.live), (over <= 0 ? i + 1 : (long)max_regions) + waiting);
        ck_assert_uint_eq(stats_of(cache).retired_waiting, (uint64_t)waiting);
        ck_assert_uint_eq(stats_of(cache).entries, (uint64_t)(over <= 0 ? i + 1 : (long)max_regions));
    }
    ck_assert_int_eq(atomic_load(&f.deregs), 3 * batch);
    vmt_device_detach(dev);
    ck_assert_int_eq(atomic_load(&f.live), 0);
    munmap(base, (size_t)n * 2 * page);
    vmt_cache_destroy(cache);
}

START_TEST(soft_limit_evictions_go_in_batches)
{
    soft_batch_case(320, 0, 10);
    soft_batch_case(2000, 0, 16);           /* the batch's ceiling */
    soft_batch_case(63, 0, 1);              /* small limits: at once */
    soft_batch_case(320, 1ul << 40, 1);     /* with a byte limit: at once */
}
END_TEST

int main(void)
{
    const TTest *const cases[] = {lru_by_entries, entries_evictions_wait_for_a_batch,
                                  waiting_evictions_stay_within_max_bytes, soft_device_limits,
                                  soft_limit_keeps_the_range_it_inserts,
                                  soft_limit_evictions_go_in_batches, limits_bytes_and_device, device_byte_budget,
                                  evict_and_retry, NULL};
    return check_run_cases("cache evict", 60, cases);
}
