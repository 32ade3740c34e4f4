/* libvmtrack-ucx's event feed: UCX's caches take their memory events from vmtrack.
 *
 * At load the module learns which UCX runs (ucx_release.c) and decides, once, what it does:
 *
 *  - a release it does not know: nothing. It says so once and UCX keeps its own hooks and
 *    caches; the interposed rcache functions only forward.
 *  - vmtrack's hooks tracker (every UCX it knows): UCM_EVENT_VM_UNMAPPED is declared external
 *    before any rcache subscribes to it, so ucm installs no libc hooks for it, and a vmtrack
 *    subscriber hands each range vmtrack reports to ucm_vm_munmap(), which runs every
 *    rcache's unmapped callback. The subscriber runs in the unmapping thread before the
 *    system call: the guarantee UCX's own hooks give, from the one patcher in the process
 *    (VMT_UCX_SYNC).
 *  - a tracker that reports only the ranges it watches (kmod, uffd): UCX's regions are
 *    watched and checked on every hit (rcache_watch.c), or on UCX 1.13 served from
 *    vmt_shared() (rcache_native.c) (VMT_UCX_WATCH). From 1.14 on UCP's hits are inline code
 *    in libucp; they are checked where they call ucs_pgtable_lookup, which needs the
 *    module's lookup to be the one the process calls (preloaded, or linked before libucs)
 *    and UCX's own hooks not installed.
 *  - the same trackers where those checks cannot be set up (1.14 on): no hit could be
 *    checked, so UCX gets no cache that depends on unmap events (rcache_native.c refuses
 *    their creation) and registers per operation: slower, never stale (VMT_UCX_UNCACHED).
 *    Said once, with the reason.
 *
 * Where events reach UCX: with hooks the subscriber runs in the unmapping thread before the
 * system call, as UCX's own hooks do, and calls ucm_vm_munmap there. In WATCH mode a report
 * can come after the pages are gone, from uffd's monitor thread, and UCX's unmap callback
 * may map memory (its rcache grows its pool with mmap): on that thread
 * the new mapping could take the very range the application has just unmapped and is about
 * to map again with MAP_FIXED, which then overwrites UCX's pool. So in WATCH mode the
 * subscriber only queues the range (a fixed array under a mutex, nothing allocated) and the
 * ranges reach UCX from the application's next call into a wrapped rcache (ucx_feed_drain).
 * Holding them back never lets a stale hit through: every hit is checked against the watch,
 * which the tracker drops before it reports. */
#define _GNU_SOURCE
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <stdarg.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ucm/api/ucm.h>
#include "uct_witness.h"
#include "ucx_feed.h"
#include "ucx_release.h"
#include "vmtrack.h"
#include "vmtrack_ucx.h"

/* ---- state --------------------------------------------------------------------------- */
static struct {
    pthread_mutex_t lock;           /* init */
    _Atomic int inited;
    _Atomic int mode;               /* enum vmt_ucx_mode */
    char why[256];
    char tracker[16];
    int loglevel;                   /* 0 error, 1 warn, 2 info, 3 debug */
    struct vmt_cache *shared;
    struct vmt_cache *scache;       /* SYNC: where a registration waits for unmaps in flight */
    _Atomic unsigned gen;           /* bumped in the child after fork() */
    _Atomic uint64_t events, event_bytes;
    _Atomic uint64_t queued;        /* WATCH: ranges queued for UCX (defer) */
    _Atomic uint64_t reported;      /* ranges vmtrack reported (vmt_ucx_stats) */
} g = { .lock = PTHREAD_MUTEX_INITIALIZER, .loglevel = 1 };

struct ucx_counters ucx_counters;

void ucx_log(int level, const char *fmt, ...)
{
    va_list ap;
    if (level > g.loglevel)
        return;
    va_start(ap, fmt);
    fputs("vmtrack-ucx: ", stderr);
    vfprintf(stderr, fmt, ap);
    fputc('\n', stderr);
    va_end(ap);
}

enum vmt_ucx_mode ucx_feed_mode(void)
{
    return (enum vmt_ucx_mode)atomic_load_explicit(&g.mode, memory_order_relaxed);
}

const char *ucx_feed_tracker(void)
{
    return g.tracker;
}

struct vmt_cache *ucx_feed_sync_cache(void)
{
    return g.scache;
}

unsigned ucx_feed_fork_gen(void)
{
    return atomic_load_explicit(&g.gen, memory_order_acquire);
}

uint64_t ucx_feed_events(void)
{
    /* both only grow: a caller comparing two sums sees any event reported in between,
     * delivered to UCX or still queued */
    return atomic_load_explicit(&g.events, memory_order_acquire) +
           atomic_load_explicit(&g.queued, memory_order_acquire);
}

void ucx_feed_note_event(void)
{
    atomic_fetch_add_explicit(&g.events, 1, memory_order_release);
}

/* ---- events -------------------------------------------------------------------------- */
static void deliver(uintptr_t start, size_t len)
{
    ucm_vm_munmap((void *)start, len);
    /* counted after delivery: a reader that sees the count unchanged knows UCX has every
     * event counted so far */
    atomic_fetch_add_explicit(&g.event_bytes, len, memory_order_relaxed);
    atomic_fetch_add_explicit(&g.events, 1, memory_order_release);
}

/* WATCH: ranges reported but not yet given to UCX (see the top of this file). */
#define PENDING_MAX 256
struct range {
    uintptr_t start, end;
};
static struct {
    pthread_mutex_t lock;
    _Atomic unsigned n;             /* read without the lock to skip an empty queue */
    struct range r[PENDING_MAX];
} pend = {.lock = PTHREAD_MUTEX_INITIALIZER};

static void defer(uintptr_t start, size_t len)
{
    uintptr_t end = len > UINTPTR_MAX - start ? UINTPTR_MAX : start + len;

    pthread_mutex_lock(&pend.lock);
    unsigned n = atomic_load_explicit(&pend.n, memory_order_relaxed);
    if (n < PENDING_MAX) {
        pend.r[n] = (struct range){start, end};
        atomic_store_explicit(&pend.n, n + 1, memory_order_release);
    } else {
        /* full: widen the last range to cover this one; UCX drops more, never less */
        struct range *last = &pend.r[n - 1];
        if (start < last->start)
            last->start = start;
        if (end > last->end)
            last->end = end;
    }
    pthread_mutex_unlock(&pend.lock);
    atomic_fetch_add_explicit(&g.queued, 1, memory_order_release);
}

void ucx_feed_drain(void)
{
    struct range batch[32];
    unsigned n;

    if (!atomic_load_explicit(&pend.n, memory_order_acquire))
        return;
    do {
        pthread_mutex_lock(&pend.lock);
        unsigned left = atomic_load_explicit(&pend.n, memory_order_relaxed);
        n = left < sizeof(batch) / sizeof(batch[0]) ? left : sizeof(batch) / sizeof(batch[0]);
        left -= n;
        memcpy(batch, &pend.r[left], n * sizeof(batch[0]));
        atomic_store_explicit(&pend.n, left, memory_order_relaxed);
        pthread_mutex_unlock(&pend.lock);
        /* outside the mutex: UCX's callbacks may take their locks and map memory */
        for (unsigned i = 0; i < n; i++)
            deliver(batch[i].start, batch[i].end - batch[i].start);
    } while (n);
}

void ucx_feed_on_event(void *arg, const void *addr, size_t len)
{
    (void)arg;
    if (len == 0)
        return;
    if (ucx_feed_mode() == VMT_UCX_WATCH)
        defer((uintptr_t)addr, len);
    else
        deliver((uintptr_t)addr, len);
    atomic_fetch_add_explicit(&g.reported, 1, memory_order_release);
}

/* Another patcher may have replaced vmtrack's hooks since (Open MPI's memory patcher does, in
 * MPI_Init, unless --mca memory ^patcher): then an rcache would never hear of an unmap. ucm's
 * own check fires real mmap/munmap/mremap/shm calls in this thread and sees whether the events
 * arrive. */
int ucx_feed_reaches_ucx(const char *name)
{
    ucs_status_t t = ucm_test_external_events(UCM_EVENT_VM_UNMAPPED);
    if (t == UCS_OK)
        return 1;
    ucx_log(0, "unmap events do not reach UCX (%s): another patcher replaced vmtrack's "
            "hooks (in Open MPI: --mca memory ^patcher); refusing registration cache "
            "\"%s\", UCX will register without caching", ucs_status_string(t),
            name ? name : "?");
    return 0;
}


static void atfork_child(void)
{
    pthread_mutex_init(&g.lock, NULL);
    pthread_mutex_init(&pend.lock, NULL);  /* the ranges queued stay: the child's memory too */
    atomic_fetch_add(&g.gen, 1);
}

/* ---- init ---------------------------------------------------------------------------- */
static int parse_loglevel(void)
{
    const char *s = getenv("VMTRACK_LOG");
    if (!s || !*s) return 1;
    if (!strcmp(s, "error")) return 0;
    if (!strcmp(s, "warn")) return 1;
    if (!strcmp(s, "info")) return 2;
    if (!strcmp(s, "debug")) return 3;
    return 1;   /* libvmtrack reports the bad value */
}

static void set_off(const char *fmt, ...) __attribute__((format(printf, 1, 2)));
static void set_off(const char *fmt, ...)
{
    va_list ap;
    va_start(ap, fmt);
    vsnprintf(g.why, sizeof(g.why), fmt, ap);
    va_end(ap);
    snprintf(g.tracker, sizeof(g.tracker), "off");
    atomic_store(&g.mode, VMT_UCX_OFF);
}

/* UCX_MEM_MMAP_HOOK_MODE=none must be there before libucs's constructor, which patches libc in
 * UCX's default mode (bistro): two patchers in one process are not an option. */
static int ucm_patched_libc(void)
{
    return ucm_global_opts.enable_events && ucm_global_opts.mmap_hook_mode == UCM_MMAP_HOOK_BISTRO;
}

static int off_because_patched(void)
{
    set_off("UCX's ucm already patched libc at startup (UCX_MEM_MMAP_HOOK_MODE=%s): start "
            "the process with UCX_MEM_MMAP_HOOK_MODE=none to use vmtrack; UCX keeps its "
            "own hooks", getenv("UCX_MEM_MMAP_HOOK_MODE") ? getenv("UCX_MEM_MMAP_HOOK_MODE")
                                                           : "bistro (default)");
    ucx_log(1, "%s", g.why);
    return -EBUSY;
}

/* VMTRACK_UCX: 0 when the module may go on, else why not (a negative errno). */
static int env_allows(void)
{
    const char *env = getenv("VMTRACK_UCX");

    if (!env || !*env || !strcmp(env, "1") || !strcmp(env, "on") || !strcmp(env, "yes"))
        return 0;
    if (!strcmp(env, "0") || !strcmp(env, "off") || !strcmp(env, "no")) {
        set_off("VMTRACK_UCX=%s: UCX keeps its own hooks", env);
        ucx_log(2, "%s", g.why);
        return -ECANCELED;
    }
    set_off("VMTRACK_UCX=%s is not 1 or 0: module off, UCX keeps its own hooks", env);
    ucx_log(0, "%s", g.why);
    return -EINVAL;
}

/* kmod or uffd from 1.14 on: WATCH where UCP's hits can be checked, else UNCACHED (why in
 * g.why, said once). */
static enum vmt_ucx_mode watch_or_uncached(const struct ucx_release *rel, int patched)
{
    const char *env = getenv("VMTRACK_UCX_CHECK");
    char why[200];

    if (rel->support == UCX_SERVE)
        return VMT_UCX_WATCH;
    if (env && *env && strcmp(env, "0") && strcmp(env, "1"))
        ucx_log(0, "VMTRACK_UCX_CHECK=%s is not 1 or 0: UCP's hits are checked where they can "
                "be", env);
    if (patched)
        snprintf(why, sizeof(why), "UCX's ucm patched libc at startup (start the process "
                 "with UCX_MEM_MMAP_HOOK_MODE=none for UCP's cache)");
    else if (env && !strcmp(env, "0"))
        snprintf(why, sizeof(why), "VMTRACK_UCX_CHECK=0");
    else if (ucx_release_lookups_reach_module(why, sizeof(why)) == 0)
        return VMT_UCX_WATCH;
    snprintf(g.why, sizeof(g.why), "UCX %.16s: UCP's cache hits cannot be checked (%.100s): UCX "
             "gets no cache needing unmap events, registers per operation", rel->name, why);
    ucx_log(1, "%s", g.why);
    return VMT_UCX_UNCACHED;
}

/* The mode for vmtrack's tracker under this release, and what SYNC mode needs. */
static int choose_mode(const struct ucx_release *rel, const char *tracker, int patched)
{
    int ret;

    if (!strcmp(tracker, "hooks")) {
        /* A private hooks cache (no subscriber: the shared cache already reports every unmap):
         * a vmt_get on it waits while an unmap of the range is in flight, which closes the
         * window between the event (before the system call) and the unmap itself. */
        VMT_OPTS(vmt_cache_opts, o, .tracker = "hooks", .max_entries = (size_t)1 << 16,
                 .max_bytes = SIZE_MAX / 4);
        ret = vmt_cache_create(&o, &g.scache);
        if (ret < 0) {
            set_off("cannot create the module's hooks cache (%s): UCX keeps its own hooks",
                    vmt_strerror(ret));
            ucx_log(0, "%s", g.why);
            return ret;
        }
        atomic_store(&g.mode, VMT_UCX_SYNC);
        return 0;
    }
    if (strcmp(tracker, "kmod") && strcmp(tracker, "uffd")) {
        set_off("vmtrack's tracker is \"%s\", which reports no address-space events: UCX "
                "keeps its own hooks", tracker);
        ucx_log(2, "%s", g.why);
        return -ENOTSUP;
    }
    atomic_store(&g.mode, watch_or_uncached(rel, patched));
    return 0;
}

static const char *mode_summary(const struct ucx_release *rel, enum vmt_ucx_mode mode)
{
    switch (mode) {
    case VMT_UCX_SYNC:
        return "UCX's caches get every unmap from vmtrack's hooks, before the system call";
    case VMT_UCX_WATCH:
        return rel->support == UCX_SERVE
                   ? "UCX's regions are watched by vmtrack's tracker and checked on every hit"
                   : "UCP's cache stays on; its regions are watched by vmtrack's tracker and "
                     "every hit is checked (ucs_pgtable_lookup, ucs_rcache_get)";
    default:
        return "off";
    }
}

static int init_locked(void)
{
    const struct ucx_release *rel;
    const char *tracker;
    int ret, patched;

    g.loglevel = parse_loglevel();
    rel = ucx_release();
    if (rel->support == UCX_UNKNOWN) {
        /* said once, whatever VMTRACK_LOG says: the user asked for the module */
        set_off("%s: the module stays out of UCX's way (UCX keeps its own hooks and caches)",
                rel->why);
        fprintf(stderr, "vmtrack-ucx: %s\n", g.why);
        return -ENOTSUP;
    }
    ucx_real_resolve();
    if (!ucx_real.create || !ucx_real.destroy || !ucx_real.put) {
        set_off("libucs's ucs_rcache functions not found after this module");
        ucx_log(0, "%s", g.why);
        return -ENOENT;
    }
    ret = env_allows();
    if (ret < 0)
        return ret;
    /* Under 1.14 on with kmod or uffd UCX's own hooks only cost UCP's cache (UNCACHED): those
     * trackers patch nothing. Which tracker is known only below. */
    patched = ucm_patched_libc();
    if (patched && rel->support == UCX_SERVE)
        return off_because_patched();
    if (!ucm_global_opts.enable_events) {
        set_off("UCX_MEM_EVENTS=no: UCX's registration caches are off, nothing to feed");
        ucx_log(2, "%s", g.why);
        return -ENOTSUP;
    }

    g.shared = vmt_shared();
    if (!g.shared && patched)
        return off_because_patched();
    if (!g.shared) {
        ret = errno ? -errno : -EIO;
        set_off("vmt_shared() failed (%s; VMTRACK_TRACKER=%s): UCX keeps its own hooks",
                strerror(-ret), getenv("VMTRACK_TRACKER") ? getenv("VMTRACK_TRACKER") : "auto");
        ucx_log(0, "%s", g.why);
        return ret;
    }
    tracker = vmt_cache_tracker(g.shared);
    if (patched && !strcmp(tracker, "hooks"))
        return off_because_patched();
    ret = choose_mode(rel, tracker, patched);
    if (ret < 0)
        return ret;

    if (atomic_load(&g.mode) != VMT_UCX_UNCACHED) {
        ret = vmt_subscribe(g.shared, ucx_feed_on_event, NULL);
        if (ret < 0) {
            set_off("vmt_subscribe failed (%s): UCX keeps its own hooks", vmt_strerror(ret));
            ucx_log(0, "%s", g.why);
            return ret;
        }
        /* From here on UCX's caches get their unmap events from us, not from ucm's hooks. */
        ucm_set_external_event(UCM_EVENT_VM_UNMAPPED);
        /* reloc mode patches only when a handler needs it: make sure none ever does. Set in
         * place: the mode's offset is the same in every release, the struct's size is not. */
        ucm_global_opts.mmap_hook_mode = UCM_MMAP_HOOK_NONE;
    }
    snprintf(g.tracker, sizeof(g.tracker), "%s", tracker);
    if (atomic_load(&g.mode) != VMT_UCX_UNCACHED)   /* else g.why says why not cached */
        snprintf(g.why, sizeof(g.why), "UCX %s: %s", rel->name,
                 mode_summary(rel, atomic_load(&g.mode)));
    pthread_atfork(NULL, NULL, atfork_child);
    ucx_log(2, "on, tracker %s: %s", g.tracker, g.why);
    return 0;
}

VMT_UCX_EXPORT int vmt_ucx_init(void)
{
    static int result;
    if (atomic_load_explicit(&g.inited, memory_order_acquire))
        return result;
    pthread_mutex_lock(&g.lock);
    if (!atomic_load(&g.inited)) {
        result = init_locked();
        atomic_store_explicit(&g.inited, 1, memory_order_release);
    }
    pthread_mutex_unlock(&g.lock);
    return result;
}

__attribute__((constructor)) static void vmt_ucx_ctor(void)
{
    (void)vmt_ucx_init();
}

VMT_UCX_EXPORT enum vmt_ucx_mode vmt_ucx_mode(char *why, size_t whylen)
{
    vmt_ucx_init();
    if (why && whylen)
        snprintf(why, whylen, "%s", g.why);
    return (enum vmt_ucx_mode)atomic_load(&g.mode);
}

VMT_UCX_EXPORT const char *vmt_ucx_tracker(void)
{
    vmt_ucx_init();
    return g.tracker;
}

VMT_UCX_EXPORT int vmt_ucx_stats_get(struct vmt_ucx_stats *s)
{
    struct vmt_ucx_stats v;
    if (!s || s->sz < sizeof(size_t))
        return -EINVAL;
    memset(&v, 0, sizeof(v));
    v.sz = s->sz < sizeof(v) ? s->sz : sizeof(v);
    v.events = atomic_load(&g.events);
    v.event_bytes = atomic_load(&g.event_bytes);
    v.rcaches = atomic_load(&ucx_counters.rcaches);
    v.watches = atomic_load(&ucx_counters.watches);
    v.stale = atomic_load(&ucx_counters.stale);
    v.stale_lookups = atomic_load(&ucx_counters.stale_lookups);
    v.reported = atomic_load(&g.reported);
    v.native_rcaches = atomic_load(&ucx_counters.native);
    v.forwarded_rcaches = atomic_load(&ucx_counters.forwarded);
    v.refused_rcaches = atomic_load(&ucx_counters.refused);
    ucx_witness_counts(&v.uct_registrations, &v.witness_registrations);
    memcpy(s, &v, v.sz);
    return 0;
}


VMT_UCX_EXPORT const char *vmt_ucx_release(void)
{
    return ucx_release()->name;
}
