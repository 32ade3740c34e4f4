/* The monitor's contract, driven the way libfabric 1.17 drives it (util_mem_monitor.c,
 * util_mr_cache.c), with a notify of our own in place of libfabric's: start/stop, subscribe
 * reference counts, bounded growth, valid() after a change, events outside start..stop
 * dropped, registrations cached only under a watch armed before they began, and notify only from the monitor's own thread, never while the calling thread holds
 * the (stand-in) mm_lock. Runs on the host: no provider needed. The tracker is "hooks"
 * (VMT_OFI_TEST_TRACKER to choose another). */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <pthread.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include "../lib/check_run.h"
#include "monitor.h"
#include "vmtrack.h"

#define LEN (64u << 10)

/* ---- a stand-in for libfabric's side ---------------------------------------------------- */
static pthread_mutex_t mm_lock = PTHREAD_MUTEX_INITIALIZER;   /* what libfabric calls mm_lock */
static pthread_t mm_owner;
static int mm_owned;

struct seen {
    pthread_mutex_t lock;
    int calls, wrong_thread, under_mm_lock, after_stop;
    uintptr_t last_addr;
    size_t last_len;
    uintptr_t addrs[4096];
};
static struct seen seen = {.lock = PTHREAD_MUTEX_INITIALIZER};
static struct vmt_ofi_mon mon;
static _Atomic int stop_returned;

static void fake_notify(struct fid_mem_monitor *f, const void *addr, size_t len)
{
    pthread_t notifier;
    (void)f;
    int has = vmt_ofi_mon_notifier(&mon, &notifier);
    /* libfabric's notify takes mm_lock: from a thread that holds it, that is the deadlock. */
    int self_held = __atomic_load_n(&mm_owned, __ATOMIC_ACQUIRE) &&
                    pthread_equal(__atomic_load_n(&mm_owner, __ATOMIC_RELAXED), pthread_self());
    pthread_mutex_lock(&mm_lock);
    pthread_mutex_lock(&seen.lock);
    if (seen.calls < 4096)
        seen.addrs[seen.calls] = (uintptr_t)addr;
    seen.calls++;
    seen.last_addr = (uintptr_t)addr;
    seen.last_len = len;
    if (!has || !pthread_equal(notifier, pthread_self()))
        seen.wrong_thread++;
    if (self_held)
        seen.under_mm_lock++;
    if (atomic_load(&stop_returned))
        seen.after_stop++;
    pthread_mutex_unlock(&seen.lock);
    pthread_mutex_unlock(&mm_lock);
}

static struct fi_ops_mem_notify fake_import = {.size = sizeof(fake_import), .notify = fake_notify};

static void mm_enter(void)
{
    pthread_mutex_lock(&mm_lock);
    __atomic_store_n(&mm_owner, pthread_self(), __ATOMIC_RELAXED);
    __atomic_store_n(&mm_owned, 1, __ATOMIC_RELEASE);
}

static void mm_leave(void)
{
    __atomic_store_n(&mm_owned, 0, __ATOMIC_RELEASE);
    pthread_mutex_unlock(&mm_lock);
}

/* subscribe and valid as libfabric calls them: under mm_lock. */
static int subscribe(void *addr, size_t len)
{
    mm_enter();
    int ret = mon.ops.subscribe(&mon.fid, addr, len);
    mm_leave();
    return ret;
}

static int valid(void *addr, size_t len)
{
    mm_enter();
    int ret = mon.ops.valid(&mon.fid, addr, len);
    mm_leave();
    return ret;
}

static int notify_calls(void)
{
    pthread_mutex_lock(&seen.lock);
    int n = seen.calls;
    pthread_mutex_unlock(&seen.lock);
    return n;
}

/* Wait (up to 5 s) until the fake notify was called at least n times. */
static int wait_notifies(int n)
{
    for (int i = 0; i < 5000 && notify_calls() < n; i++)
        usleep(1000);
    return notify_calls() >= n;
}

static struct vmt_ofi_stats stats(void)
{
    struct vmt_ofi_stats s = {.sz = sizeof(s)};
    vmt_ofi_mon_stats(&mon, &s);
    return s;
}

static void setup_mon(size_t max_ranges)
{
    ck_assert_int_eq(vmt_ofi_mon_init(&mon, max_ranges), 0);
    const char *t = getenv("VMT_OFI_TEST_TRACKER");
    mon.tracker_override = t && *t ? t : "hooks";
    mon.fid.import_ops = &fake_import;   /* what fi_import_fid fills in */
}

static void start_mon(void)
{
    int ret = mon.ops.start(&mon.fid);
    ck_assert_msg(ret == 0, "start: %d (%s)", ret, mon.why);
}

static void *map_buf(size_t len)
{
    void *p = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    memset(p, 1, len);
    return p;
}

/* New pages at the same address, through libc (the hooks tracker sees it), in one system call:
 * munmap + mmap would be two events, and the second, still queued when the first one's notify
 * emptied the table, would doom a range the test subscribes again after that notify (a
 * spurious miss, not a stale hit, but not what the tests below assert). */
static void replace_pages(void *p, size_t len)
{
    void *q = mmap(p, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
    ck_assert_ptr_eq(q, p);
    memset(p, 2, len);
}

/* Whether the watch cache keeps a log of every change (hooks; kmod with a module that logs;
 * not uffd). */
static bool changes_logged(void)
{
    uint64_t mark;
    return mon.wcache && vmt_changes_mark(mon.wcache, &mark) == 0;
}

/* A range's first registration by a thread that has called the monitor before: cached at
 * once where the watch cache logs changes and none touched the range since that call;
 * elsewhere its subscribe arms the watch it found and refuses (arms.h), and the next
 * registration of the range by the same thread is cached. */
static void first_subscribe(void *p, size_t len)
{
    uint64_t unarmed = stats().subscribes_unarmed;
    if (changes_logged()) {
        uint64_t logged = stats().subscribes_logged;
        ck_assert_int_eq(subscribe(p, len), 0);
        ck_assert_uint_eq(stats().subscribes_logged, logged + 1);
        ck_assert_uint_eq(stats().subscribes_unarmed, unarmed);
        return;
    }
    ck_assert_int_ne(subscribe(p, len), 0);
    ck_assert_uint_eq(stats().subscribes_unarmed, unarmed + 1);
    ck_assert_int_eq(subscribe(p, len), 0);
    ck_assert_uint_eq(stats().subscribes_unarmed, unarmed + 1);
}

/* A started monitor with one range of LEN bytes cached (a domain's first two misses). */
static void *started_with_range(void)
{
    setup_mon(0);
    start_mon();
    void *p = map_buf(LEN);
    first_subscribe(p, LEN);
    return p;
}

/* Wait (up to 1 s) for the notifier to have emptied every slot. */
static void wait_ranges_empty(void)
{
    for (int i = 0; i < 1000 && stats().ranges; i++)
        usleep(1000);
    ck_assert_uint_eq(stats().ranges, 0);
}

/* ---- tests ------------------------------------------------------------------------------- */
START_TEST(before_start_nothing_is_cached)
{
    setup_mon(0);
    void *p = map_buf(LEN);
    ck_assert_int_ne(subscribe(p, LEN), 0);   /* refused: libfabric keeps the MR uncached */
    ck_assert_int_eq(valid(p, LEN), 0);
    struct vmt_ofi_stats s = stats();
    ck_assert_uint_eq(s.subscribes_refused, 1);
    ck_assert_uint_eq(s.ranges, 0);
    ck_assert_int_eq(notify_calls(), 0);
}
END_TEST

START_TEST(hit_then_change_then_miss)
{
    void *p = started_with_range();
    ck_assert_int_eq(valid(p, LEN), 1);
    ck_assert_int_eq(valid(p, LEN), 1);
    replace_pages(p, LEN);
    ck_assert_int_eq(valid(p, LEN), 0);   /* whatever the notifier did meanwhile */
    ck_assert(wait_notifies(1));
    ck_assert_uint_le(seen.last_addr, (uintptr_t)p);
    ck_assert_uint_ge(seen.last_addr + seen.last_len, (uintptr_t)p + LEN);
    /* After the notify the range is cacheable again, under the new watch the false valid()
     * armed before libfabric registered the range again: no second refusal. */
    wait_ranges_empty();
    ck_assert_int_eq(subscribe(p, LEN), 0);
    ck_assert_int_eq(valid(p, LEN), 1);
    ck_assert_int_eq(seen.wrong_thread, 0);
    ck_assert_int_eq(seen.under_mm_lock, 0);
}
END_TEST

START_TEST(valid_asks_vmtrack_without_the_notifier)
{
    /* With the notifier stopped nothing marks the range dead: valid() itself must see the
     * change through vmtrack's watch. */
    void *p = started_with_range();
    atomic_store(&mon.quit, 1);
    vmt_ofi_queue_kick(&mon.queue);
    pthread_join(mon.thread, NULL);
    atomic_store(&mon.thread_up, 0);
    ck_assert_int_eq(valid(p, LEN), 1);
    replace_pages(p, LEN);
    ck_assert_int_eq(valid(p, LEN), 0);
    ck_assert_int_eq(valid(p, LEN), 0);
    ck_assert_int_ne(subscribe(p, LEN), 0);   /* not again until notified */
    ck_assert_int_eq(notify_calls(), 0);      /* and never synchronously */
}
END_TEST

START_TEST(two_domains_share_a_range)
{
    setup_mon(0);
    start_mon();
    void *p = map_buf(LEN);
    first_subscribe(p, LEN);               /* domain 1 */
    ck_assert_int_eq(subscribe(p, LEN), 0);   /* domain 2, same range */
    ck_assert_uint_eq(stats().ranges, 1);
    /* unsubscribe (libfabric >= 2.1): one reference less keeps the range; the last drops it
     * after a notify. */
    mon.ops.unsubscribe(&mon.fid, p, LEN);
    ck_assert_int_eq(valid(p, LEN), 1);
    mon.ops.unsubscribe(&mon.fid, p, LEN);
    ck_assert_int_eq(valid(p, LEN), 0);
    ck_assert(wait_notifies(1));
    wait_ranges_empty();
}
END_TEST

START_TEST(a_changed_range_is_not_recached_before_its_notify)
{
    /* Domain 1 and 2 cache range R under watch W. R changes. Domain 1's hit says false and it
     * registers again; its subscribe must not put R under a new watch while domain 2's entry
     * (old pages) may still be cached: refused until the notify went out. */
    void *p = started_with_range();
    ck_assert_int_eq(subscribe(p, LEN), 0);
    pthread_mutex_lock(&mon.notify_lock);     /* hold the notifier back */
    replace_pages(p, LEN);
    ck_assert_int_eq(valid(p, LEN), 0);       /* domain 1's hit */
    ck_assert_int_ne(subscribe(p, LEN), 0);   /* its new registration: not cached yet */
    ck_assert_int_eq(valid(p, LEN), 0);       /* domain 2's hit on the old entry */
    pthread_mutex_unlock(&mon.notify_lock);
    ck_assert(wait_notifies(1));
    wait_ranges_empty();
    ck_assert_int_eq(subscribe(p, LEN), 0);
    ck_assert_int_eq(valid(p, LEN), 1);
}
END_TEST

START_TEST(growth_is_bounded)
{
    enum { N = 600, MAX = 16 };
    setup_mon(MAX);
    start_mon();
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    char *p = map_buf((size_t)N * page);
    int cached = 0;
    bool logged = changes_logged();   /* first registrations cached at once (hooks) */
    for (int i = 0; i < N; i++) {
        if (logged) {
            cached += subscribe(p + (size_t)i * page, page) == 0;
            continue;
        }
        ck_assert_int_ne(subscribe(p + (size_t)i * page, page), 0);   /* arms */
        cached += subscribe(p + (size_t)i * page, page) == 0;
    }
    struct vmt_ofi_stats s = stats();
    ck_assert_uint_le(s.ranges, MAX);
    ck_assert_uint_gt(s.evictions, 0);
    ck_assert_int_gt(cached, MAX / 2);
    ck_assert_uint_eq(s.subscribes_unarmed, logged ? 0 : N);
    ck_assert_uint_eq(s.subscribes_refused, (uint64_t)((logged ? N : N + N) - cached));
    /* Evicted ranges are notified (so libfabric drops their entries) and answer false. */
    ck_assert(wait_notifies((int)s.evictions));
    ck_assert_int_eq(valid(p, page), 0);
    ck_assert_int_eq(seen.wrong_thread, 0);
}
END_TEST

START_TEST(no_notify_after_stop_events_dropped)
{
    void *p = started_with_range();
    mon.ops.stop(&mon.fid);
    atomic_store(&stop_returned, 1);
    ck_assert_uint_eq(stats().ranges, 0);    /* no cache left, so no entry: all dropped */
    uint64_t dropped = stats().events_dropped;
    replace_pages(p, LEN);
    usleep(50000);
    ck_assert_int_eq(notify_calls(), 0);
    ck_assert_uint_gt(stats().events_dropped, dropped);
    ck_assert_int_eq(valid(p, LEN), 0);
    ck_assert_int_ne(subscribe(p, LEN), 0);
    ck_assert_int_eq(seen.after_stop, 0);
    /* A second session works like the first (the pages changed meanwhile: armed again). */
    atomic_store(&stop_returned, 0);
    start_mon();
    first_subscribe(p, LEN);
    ck_assert_int_eq(valid(p, LEN), 1);
    ck_assert_uint_eq(stats().starts, 2);
}
END_TEST

/* Unmaps in one thread while another subscribes and validates the same ranges under mm_lock:
 * every notify from the monitor's thread, none under mm_lock, no deadlock (the test's timeout
 * would say), a range subscribe accepts was not replaced since its (stand-in) pin, and a range
 * valid() accepts was not changed since its subscribe. */
struct race { char *buf; size_t page; int n; _Atomic int stop; _Atomic unsigned long gen[64]; };

static void *unmapper(void *arg)
{
    struct race *r = arg;
    unsigned i = 0;
    while (!atomic_load(&r->stop)) {
        int k = (int)(i++ % (unsigned)r->n);
        atomic_fetch_add(&r->gen[k], 1);
        void *q = mmap(r->buf + (size_t)k * r->page, r->page, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED, -1, 0);
        if (q == MAP_FAILED)
            abort();
        atomic_fetch_add(&r->gen[k], 1);
    }
    return NULL;
}

START_TEST(unmaps_racing_subscribe_and_valid)
{
    setup_mon(64);
    start_mon();
    struct race r = {.page = (size_t)sysconf(_SC_PAGESIZE), .n = 32};
    r.buf = map_buf((size_t)r.n * r.page);
    pthread_t t;
    pthread_create(&t, NULL, unmapper, &r);
    unsigned long wrong = 0, stale_pins = 0, hits = 0;
    for (int i = 0; i < 20000; i++) {
        int k = i % r.n;
        char *p = r.buf + (size_t)k * r.page;
        int cached = 0;
        for (int attempt = 0; attempt < 2 && !cached; attempt++) {
            /* The provider pins p here, after this thread's previous monitor call ended. */
            unsigned long pinned = atomic_load(&r.gen[k]);
            if (i & 2)
                usleep(20);   /* room for a replacement between the pin and subscribe */
            unsigned long at_subscribe = atomic_load(&r.gen[k]);
            if (subscribe(p, r.page) != 0)
                continue;
            cached = 1;
            /* A whole replacement between the pin and subscribe: subscribe had to refuse. */
            if (!(pinned & 1) && at_subscribe >= pinned + 2)
                stale_pins++;
        }
        if (!cached)
            continue;
        unsigned long after_sub = atomic_load(&r.gen[k]);
        if (i & 1)
            usleep(20);   /* half the time, leave the unmapper room before the hit */
        unsigned long before_valid = atomic_load(&r.gen[k]);
        if (valid(p, r.page)) {
            hits++;
            /* A whole replacement that began after the subscribe returned and ended before
             * valid() was called: valid() had to say false. */
            if (!(after_sub & 1) && before_valid >= after_sub + 2)
                wrong++;
        }
    }
    atomic_store(&r.stop, 1);
    pthread_join(t, NULL);
    ck_assert_uint_eq(stale_pins, 0);
    ck_assert_uint_eq(wrong, 0);
    ck_assert_uint_gt(hits, 0);
    ck_assert_int_eq(seen.wrong_thread, 0);
    ck_assert_int_eq(seen.under_mm_lock, 0);
}
END_TEST

/* libfabric 1.17 pins the pages (add_region) before it subscribes. Pages replaced in between
 * must not be cached: the watch subscribe finds then is younger than the pinned pages. */
START_TEST(pages_replaced_during_registration_are_not_cached)
{
    void *p = started_with_range();           /* cached under watch W1 */
    ck_assert_int_eq(valid(p, LEN), 1);       /* this thread's last call before registering */
    /* ...libfabric drops the entry (LRU), this thread registers R again: pins old pages... */
    replace_pages(p, LEN);                    /* ...another thread replaces them meanwhile */
    ck_assert_int_ne(subscribe(p, LEN), 0);   /* the new watch is not the one armed before */
    /* The refusal armed the watch on the new pages: the next registration pins those. */
    wait_ranges_empty();
    ck_assert_int_eq(subscribe(p, LEN), 0);
    ck_assert_int_eq(valid(p, LEN), 1);
}
END_TEST

/* The watch must have been armed before the subscribing thread's previous call ended: one
 * armed by another thread later may be younger than this thread's pinned pages. */
struct arm_call { void *p; int ret; };

static void *subscribe_in_thread(void *arg)
{
    struct arm_call *c = arg;
    c->ret = subscribe(c->p, LEN);
    return NULL;
}

START_TEST(a_watch_armed_by_another_thread_later_is_not_trusted)
{
    setup_mon(0);
    start_mon();
    void *p = map_buf(LEN), *other = map_buf(LEN);
    ck_assert_int_eq(valid(other, LEN), 0);   /* this thread's last call ends here */
    struct arm_call c = {.p = p, .ret = 0};
    pthread_t t;
    pthread_create(&t, NULL, subscribe_in_thread, &c);   /* arms p after that */
    pthread_join(t, NULL);
    ck_assert_int_ne(c.ret, 0);   /* that thread's first call: no earlier mark of its own */
    if (changes_logged()) {
        /* The log shows p unchanged since this thread's last call: cached without the arm. */
        ck_assert_int_eq(subscribe(p, LEN), 0);
        ck_assert_uint_eq(stats().ranges, 1);
        return;
    }
    uint64_t unarmed = stats().subscribes_unarmed;
    ck_assert_int_ne(subscribe(p, LEN), 0);   /* armed, but after this thread's last call */
    ck_assert_uint_eq(stats().subscribes_unarmed, unarmed + 1);
    ck_assert_int_eq(subscribe(p, LEN), 0);   /* now armed before this thread's last call */
    ck_assert_uint_eq(stats().ranges, 1);
}
END_TEST

/* Where the watch cache logs changes (hooks): a range's first registration is cached when no
 * change touched it since the thread's previous call, changes elsewhere do not matter, and a
 * change of the range in between, or more changes than the log keeps, refuse it. Elsewhere
 * (uffd) no log is kept and the first registration only arms. */
START_TEST(first_registration_cached_where_changes_are_logged)
{
    setup_mon(0);
    start_mon();
    char *p = map_buf(4 * LEN);
    if (!changes_logged()) {
        uint64_t mark;
        ck_assert_int_eq(vmt_changes_mark(mon.wcache, &mark), -ENOTSUP);
        ck_assert_int_ne(subscribe(p, LEN), 0);   /* arms only */
        ck_assert_uint_eq(stats().subscribes_unarmed, 1);
        return;
    }
    ck_assert_int_eq(valid(p + 3 * LEN, LEN), 0);   /* this thread's previous call */
    replace_pages(p + LEN, LEN);                    /* another range changes */
    ck_assert_int_eq(subscribe(p, LEN), 0);         /* cached at once */
    ck_assert_int_eq(valid(p, LEN), 1);
    replace_pages(p + 2 * LEN, LEN);                /* between a call and the next pin */
    ck_assert_int_ne(subscribe(p + 2 * LEN, LEN), 0);
    ck_assert_uint_eq(stats().subscribes_unarmed, 1);
    /* More changes since the last call than the log keeps: nothing can be proven. */
    for (int i = 0; i < 300; i++)
        replace_pages(p + 3 * LEN, LEN);
    ck_assert_int_ne(subscribe(p + LEN, LEN), 0);
    ck_assert_uint_eq(stats().subscribes_logged, 1);
    ck_assert_uint_eq(stats().subscribes_unarmed, 2);
}
END_TEST

START_TEST(ranges_refuse_a_new_watch_for_a_known_range)
{
    struct vmt_ofi_ranges t;
    ck_assert_int_eq(vmt_ofi_ranges_init(&t, 8), 0);
    /* Two distinct "watches": any two non-NULL pointers stand for two registrations. */
    struct vmt_reg *w1 = (struct vmt_reg *)0x1000, *w2 = (struct vmt_reg *)0x2000;
    uintptr_t va;
    size_t vl;
    ck_assert_int_eq(vmt_ofi_ranges_add(&t, 0x10000, 4096, w1, &va, &vl), VMT_OFI_ADDED);
    ck_assert_int_eq(vmt_ofi_ranges_add(&t, 0x10000, 4096, w1, &va, &vl), VMT_OFI_SHARED);
    ck_assert_int_eq(vmt_ofi_ranges_add(&t, 0x10000, 4096, w2, &va, &vl), VMT_OFI_DEAD);
    struct vmt_reg *w;
    uint64_t tok;
    ck_assert(!vmt_ofi_ranges_find(&t, 0x10000, 4096, &w, &tok));   /* dead now */
    ck_assert_uint_eq(vmt_ofi_ranges_doom(&t, 0x10800, 1, 7), 1);
    /* Emptying would vmt_put the stand-in watches: clear them by hand instead. */
    for (size_t i = 0; i < t.buckets * VMT_OFI_WAYS; i++)
        atomic_store(&t.slots[i].watch, NULL);
    free(t.slots);
}
END_TEST

/* The witness counts the subscribes and valids that overlap its range, and only those. */
START_TEST(witness_counts_calls_on_its_range)
{
    setup_mon(0);
    start_mon();
    unsigned char *p = map_buf(2 * LEN);
    vmt_ofi_mon_witness(&mon, (uintptr_t)p, LEN);
    first_subscribe(p + LEN, LEN);   /* beside the witnessed range */
    ck_assert_uint_eq(stats().witness_subscribes, 0);
    uint64_t subs = stats().subscribes;
    first_subscribe(p, LEN);
    ck_assert_uint_eq(stats().witness_subscribes, stats().subscribes - subs);
    ck_assert_int_eq(valid(p, LEN), 1);
    ck_assert_int_eq(valid(p + LEN, LEN), 1);
    ck_assert_uint_eq(stats().witness_valids, 1);
    vmt_ofi_mon_witness(&mon, 0, 0);   /* stops counting */
    ck_assert_int_eq(valid(p, LEN), 1);
    ck_assert_uint_eq(stats().witness_valids, 1);
}
END_TEST

static Suite *suite(void)
{
    Suite *s = suite_create("ofi-monitor contract");
    TCase *tc = tcase_create("contract");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, before_start_nothing_is_cached);
    tcase_add_test(tc, hit_then_change_then_miss);
    tcase_add_test(tc, valid_asks_vmtrack_without_the_notifier);
    tcase_add_test(tc, two_domains_share_a_range);
    tcase_add_test(tc, a_changed_range_is_not_recached_before_its_notify);
    tcase_add_test(tc, growth_is_bounded);
    tcase_add_test(tc, no_notify_after_stop_events_dropped);
    tcase_add_test(tc, unmaps_racing_subscribe_and_valid);
    tcase_add_test(tc, pages_replaced_during_registration_are_not_cached);
    tcase_add_test(tc, a_watch_armed_by_another_thread_later_is_not_trusted);
    tcase_add_test(tc, first_registration_cached_where_changes_are_logged);
    tcase_add_test(tc, ranges_refuse_a_new_watch_for_a_known_range);
    tcase_add_test(tc, witness_counts_calls_on_its_range);
    suite_add_tcase(s, tc);
    return s;
}

int main(void)
{
    return check_run(suite(), CK_FORK) ? 1 : 0;
}
