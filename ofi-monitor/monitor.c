/* vmtrack's memory monitor for libfabric (monitor.h has the contract of each callback). */
#define _GNU_SOURCE
#include "monitor.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "vmtrack.h"

#define COUNT(m, f) __atomic_fetch_add(&(m)->st.f, 1, __ATOMIC_RELAXED)
#define NOTIFIER_IDLE_MS 1000

static struct vmt_ofi_mon *mon_of(struct fid_mem_monitor *f)
{
    return (struct vmt_ofi_mon *)f;   /* fid is the first member */
}

/* ---- the watch cache ------------------------------------------------------------------ */
static int watch_reg(void *ctx, void *addr, size_t len, unsigned access, void **handle)
{
    (void)ctx; (void)addr; (void)len; (void)access;
    *handle = NULL;
    return 0;
}

static void watch_dereg(void *ctx, void *handle)
{
    (void)ctx; (void)handle;
}

static const struct vmt_device_ops watch_ops = {
    .sz = sizeof(struct vmt_device_ops),
    .name = "ofi-watch",
    .reg = watch_reg,
    .dereg = watch_dereg,
};

/* A vmtrack event: called in whatever thread vmtrack's tracker reports from (the unmapping
 * thread inside a hook, which may hold libfabric's mm_lock): only queue it. */
static void on_event(void *arg, const void *addr, size_t len)
{
    struct vmt_ofi_mon *m = arg;
    if (!atomic_load_explicit(&m->running, memory_order_acquire)) {
        COUNT(m, events_dropped);
        return;
    }
    if (!vmt_ofi_ranges_maybe(&m->ranges, (uintptr_t)addr, len))
        return;
    COUNT(m, events);
    vmt_ofi_queue_push(&m->queue, (uintptr_t)addr, len);
}

/* Tracker "none": the shared cache is fed by hand (Open MPI's patcher through rcache vmtrack
 * calls vmt_invalidate); pass what it hears on to the watch cache. */
static void on_shared_event(void *arg, const void *addr, size_t len)
{
    struct vmt_ofi_mon *m = arg;
    vmt_invalidate(m->wcache, addr, len);
}

static int watch_open(struct vmt_ofi_mon *m)
{
    if (m->wcache)
        return 0;
    const char *tracker = m->tracker_override;
    struct vmt_cache *shared = NULL;
    if (!tracker) {
        shared = vmt_shared();
        if (!shared) {
            snprintf(m->why, sizeof(m->why), "vmtrack's shared cache: %s",
                     vmt_strerror(-errno));
            return -FI_ENODEV;
        }
        tracker = vmt_cache_tracker(shared);
    }
    if (!strcmp(tracker, "pass")) {
        snprintf(m->why, sizeof(m->why), "vmtrack's tracker is \"pass\" (no tracker works "
                 "here): nothing may be cached, so libfabric's MR cache stays off");
        return -FI_ENOSYS;
    }
    struct vmt_cache_opts o = {
        .sz = sizeof(o), .tracker = tracker, .max_entries = 4 * m->max_ranges + 64,
        .max_bytes = (size_t)1 << 46, .flags = VMT_CACHE_NO_MERGE,
    };
    int ret = vmt_cache_create(&o, &m->wcache);
    if (ret < 0) {
        snprintf(m->why, sizeof(m->why), "watch cache with tracker %s: %s", tracker,
                 vmt_strerror(ret));
        m->wcache = NULL;
        return -FI_ENODEV;
    }
    ret = vmt_device_attach(m->wcache, &watch_ops, m, &m->wdev);
    if (ret == 0)
        ret = vmt_subscribe(m->wcache, on_event, m);
    if (ret == 0 && shared && !strcmp(tracker, "none")) {
        ret = vmt_subscribe(shared, on_shared_event, m);
        m->fed_from = ret == 0 ? shared : NULL;
    }
    if (ret < 0) {
        snprintf(m->why, sizeof(m->why), "watch cache: %s", vmt_strerror(ret));
        if (m->wdev)
            vmt_device_detach(m->wdev);
        vmt_cache_destroy(m->wcache);
        m->wcache = NULL;
        m->wdev = NULL;
        return -FI_ENODEV;
    }
    snprintf(m->tracker, sizeof(m->tracker), "%s", vmt_cache_tracker(m->wcache));
    return 0;
}

/* ---- the notifier --------------------------------------------------------------------- */
/* One changed range: mark the subscribed ranges it overlaps dead, notify libfabric, then
 * empty those slots. No slot overlaps: no libfabric entry can (an entry exists only while its
 * slot does), so there is nothing to tell. */
static void deliver(struct vmt_ofi_mon *m, uintptr_t addr, size_t len)
{
    uint64_t pass = ++m->pass;
    if (!vmt_ofi_ranges_doom(&m->ranges, addr, len, pass))
        return;
    pthread_mutex_lock(&m->notify_lock);
    if (m->started) {
        m->fid.import_ops->notify(&m->fid, (const void *)addr, len);
        COUNT(m, notifies);
    } else {
        COUNT(m, events_dropped);
    }
    pthread_mutex_unlock(&m->notify_lock);
    vmt_ofi_ranges_sweep(&m->ranges, pass);
}

static void *notifier_main(void *arg)
{
    struct vmt_ofi_mon *m = arg;
    while (!atomic_load_explicit(&m->quit, memory_order_acquire)) {
        uint32_t seen = atomic_load_explicit(&m->queue.wake, memory_order_acquire);
        uintptr_t addr;
        size_t len;
        int got = 0;
        while (vmt_ofi_queue_pop(&m->queue, &addr, &len)) {
            deliver(m, addr, len);
            got = 1;
        }
        if (atomic_exchange_explicit(&m->queue.overflow, 0, memory_order_acq_rel)) {
            COUNT(m, overflows);
            deliver(m, 0, SIZE_MAX);
            got = 1;
        }
        if (!got)
            vmt_ofi_queue_wait(&m->queue, seen, NOTIFIER_IDLE_MS);
    }
    return NULL;
}

static int notifier_up(struct vmt_ofi_mon *m)
{
    if (atomic_load(&m->thread_up))
        return 0;
    atomic_store(&m->quit, 0);
    int ret = pthread_create(&m->thread, NULL, notifier_main, m);
    if (ret) {
        snprintf(m->why, sizeof(m->why), "notifier thread: %s", strerror(ret));
        return -FI_ENOMEM;
    }
    pthread_setname_np(m->thread, "vmtrack-ofi");
    atomic_store(&m->thread_up, 1);
    return 0;
}

/* ---- the callbacks -------------------------------------------------------------------- */
/* Called with libfabric's mm_state_lock held, no other libfabric lock. */
static int mon_start(struct fid_mem_monitor *f)
{
    struct vmt_ofi_mon *m = mon_of(f);
    pthread_mutex_lock(&m->open_lock);
    int ret = watch_open(m);
    if (ret == 0)
        ret = notifier_up(m);
    if (ret == 0) {
        pthread_mutex_lock(&m->notify_lock);
        m->started = true;
        atomic_store_explicit(&m->running, 1, memory_order_release);
        pthread_mutex_unlock(&m->notify_lock);
        COUNT(m, starts);
    } else {
        fprintf(stderr, "libvmtrack-ofi: monitor not started, libfabric registers without "
                "caching: %s\n", m->why);
    }
    pthread_mutex_unlock(&m->open_lock);
    /* A call like the others: the domain's first registration in this thread comes after it. */
    vmt_ofi_arms_call_ends(ret == 0 ? m->wcache : NULL);
    return ret;
}

/* Called with mm_state_lock held. The notifier may be inside notify (mm_list_rwlock, mm_lock),
 * neither of which the caller of stop holds: waiting for notify_lock is safe. */
static void mon_stop(struct fid_mem_monitor *f)
{
    struct vmt_ofi_mon *m = mon_of(f);
    pthread_mutex_lock(&m->notify_lock);
    m->started = false;
    atomic_store_explicit(&m->running, 0, memory_order_release);
    pthread_mutex_unlock(&m->notify_lock);
    /* No cache is attached any more, so no entry exists: every range may go. */
    uint64_t pass = ~0ull;
    vmt_ofi_ranges_doom(&m->ranges, 0, SIZE_MAX, pass);
    vmt_ofi_ranges_sweep(&m->ranges, pass);
    COUNT(m, stops);
}

/* Does [addr, addr+len) overlap the witnessed range? (counted for tests, see the header) */
static bool witnessed(struct vmt_ofi_mon *m, uintptr_t addr, size_t len)
{
    uintptr_t lo = atomic_load_explicit(&m->witness_lo, memory_order_relaxed);
    uintptr_t hi = atomic_load_explicit(&m->witness_hi, memory_order_relaxed);
    return lo < hi && addr < hi && addr + len > lo;
}

void vmt_ofi_mon_witness(struct vmt_ofi_mon *m, uintptr_t addr, size_t len)
{
    atomic_store(&m->witness_lo, addr);
    atomic_store(&m->witness_hi, addr + len);
}

static int subscribe_range(struct vmt_ofi_mon *m, uintptr_t addr, size_t len)
{
    struct vmt_reg *w;
    COUNT(m, subscribes);
    if (witnessed(m, addr, len))
        COUNT(m, witness_subscribes);
    if (!atomic_load_explicit(&m->running, memory_order_acquire) || !len) {
        COUNT(m, subscribes_refused);
        return -FI_EAGAIN;
    }
    int ret = vmt_get(m->wdev, (void *)addr, len, VMT_ACCESS_READ, &w);
    if (ret < 0) {
        COUNT(m, subscribes_refused);
        return ret;   /* -EFAULT (unmapped), -ENOTSUP (untrackable), -ENOSPC: not cached */
    }
    /* Cached at once where the log shows the range unchanged since this thread's previous
     * call (the watch is taken: later changes retire it); else only under an armed watch. */
    if (vmt_ofi_unchanged_since_call(m->wcache, addr, len)) {
        COUNT(m, subscribes_logged);
    } else if (!vmt_ofi_arms_trust(&m->arms, addr, len, w)) {
        /* The watch may be younger than the pages the provider pinned (arms.h); armed now. */
        COUNT(m, subscribes_unarmed);
        COUNT(m, subscribes_refused);
        return -FI_EAGAIN;
    }
    uintptr_t vaddr = 0;
    size_t vlen = 0;
    switch (vmt_ofi_ranges_add(&m->ranges, addr, len, w, &vaddr, &vlen)) {
    case VMT_OFI_ADDED:
        return 0;
    case VMT_OFI_SHARED:
        vmt_put(w);
        return 0;
    case VMT_OFI_DEAD:
        vmt_put(w);
        vmt_ofi_queue_push(&m->queue, addr, len);
        COUNT(m, subscribes_refused);
        return -FI_EAGAIN;
    case VMT_OFI_FULL:
    default:
        vmt_put(w);
        vmt_ofi_queue_push(&m->queue, vaddr, vlen);
        COUNT(m, subscribes_refused);
        return -FI_ENOSPC;
    }
}

/* Under mm_lock, after the provider registered. Nonzero: libfabric uses the MR uncached. */
static int mon_subscribe(struct fid_mem_monitor *f, const void *addr, size_t len)
{
    struct vmt_ofi_mon *m = mon_of(f);
    int ret = subscribe_range(m, (uintptr_t)addr, len);
    vmt_ofi_arms_call_ends(m->wcache);
    return ret;
}

static void mon_unsubscribe(struct fid_mem_monitor *f, const void *addr, size_t len)
{
    struct vmt_ofi_mon *m = mon_of(f);
    COUNT(m, unsubscribes);
    if (vmt_ofi_ranges_release(&m->ranges, (uintptr_t)addr, len))
        vmt_ofi_queue_push(&m->queue, (uintptr_t)addr, len);
}

/* Under mm_lock, on every hit, with the cached entry's range. True only if the range is
 * still under the watch it was subscribed under and vmtrack saw no change of it: a lookup
 * without a lock, and vmtrack's hit path (with kmod: one load of the watch's word). */
static bool range_valid(struct vmt_ofi_mon *m, uintptr_t addr, size_t len)
{
    struct vmt_reg *watch, *now = NULL;
    uint64_t token;
    COUNT(m, valids);
    if (witnessed(m, addr, len))
        COUNT(m, witness_valids);
    if (!atomic_load_explicit(&m->running, memory_order_acquire))
        goto refused;
    bool found = vmt_ofi_ranges_find(&m->ranges, addr, len, &watch, &token);
    if (vmt_get(m->wdev, (void *)addr, len, VMT_ACCESS_READ, &now) < 0)
        now = NULL;
    if (found && now == watch && vmt_ofi_ranges_unchanged(&m->ranges, token)) {
        vmt_put(now);
        return true;
    }
    if (found) {
        /* Other domains may cache the same range under the same old watch: notify it. */
        vmt_ofi_ranges_kill(&m->ranges, token);
        vmt_ofi_queue_push(&m->queue, addr, len);
    }
    /* libfabric registers the range again next, in this thread: the watch it will be
     * subscribed under is the one in place now, before that registration (arms.h). */
    if (now)
        vmt_ofi_arms_set(&m->arms, addr, len, now);
refused:
    COUNT(m, valids_false);
    return false;
}

static bool mon_valid(struct fid_mem_monitor *f, const void *addr, size_t len)
{
    struct vmt_ofi_mon *m = mon_of(f);
    bool ok = range_valid(m, (uintptr_t)addr, len);
    vmt_ofi_arms_call_ends(m->wcache);
    return ok;
}

static int mon_close(struct fid *fid)
{
    (void)fid;   /* replaced by libfabric at import; never called before */
    return 0;
}

static int mon_bind(struct fid *fid, struct fid *bfid, uint64_t flags)
{
    (void)fid; (void)bfid; (void)flags;
    return -FI_ENOSYS;
}

static struct fi_ops mon_fid_ops = {
    .size = sizeof(struct fi_ops),
    .close = mon_close,
    .bind = mon_bind,
};

/* ---- life ------------------------------------------------------------------------------ */
int vmt_ofi_mon_init(struct vmt_ofi_mon *m, size_t max_ranges)
{
    memset(m, 0, sizeof(*m));
    if (!max_ranges) {
        const char *e = getenv("VMTRACK_OFI_MAX_RANGES");
        max_ranges = e && atol(e) > 0 ? (size_t)atol(e) : 4096;
    }
    m->max_ranges = max_ranges;
    int ret = vmt_ofi_ranges_init(&m->ranges, max_ranges);
    if (ret < 0)
        return ret;
    ret = vmt_ofi_arms_init(&m->arms, max_ranges);
    if (ret < 0) {
        vmt_ofi_ranges_fini(&m->ranges);
        return ret;
    }
    vmt_ofi_queue_init(&m->queue);
    pthread_mutex_init(&m->open_lock, NULL);
    pthread_mutex_init(&m->notify_lock, NULL);
    m->ops.size = sizeof(m->ops);
    m->ops.start = mon_start;
    m->ops.stop = mon_stop;
    m->ops.subscribe = mon_subscribe;
    m->ops.unsubscribe = mon_unsubscribe;
    m->ops.valid = mon_valid;
    m->fid.fid.fclass = FI_CLASS_MEM_MONITOR;
    m->fid.fid.ops = &mon_fid_ops;
    m->fid.export_ops = &m->ops;
    m->st.sz = sizeof(m->st);
    return 0;
}

void vmt_ofi_mon_fini(struct vmt_ofi_mon *m)
{
    if (atomic_load(&m->thread_up)) {
        atomic_store(&m->quit, 1);
        vmt_ofi_queue_kick(&m->queue);
        pthread_join(m->thread, NULL);
        atomic_store(&m->thread_up, 0);
    }
    vmt_ofi_ranges_fini(&m->ranges);
    vmt_ofi_arms_fini(&m->arms);
    if (m->fed_from)
        vmt_unsubscribe(m->fed_from, on_shared_event, m);
    if (m->wcache) {
        vmt_unsubscribe(m->wcache, on_event, m);
        vmt_device_detach(m->wdev);
        vmt_cache_destroy(m->wcache);
    }
    pthread_mutex_destroy(&m->open_lock);
    pthread_mutex_destroy(&m->notify_lock);
}

bool vmt_ofi_mon_notifier(struct vmt_ofi_mon *m, pthread_t *out)
{
    if (!atomic_load(&m->thread_up))
        return false;
    *out = m->thread;
    return true;
}

void vmt_ofi_mon_stats(struct vmt_ofi_mon *m, struct vmt_ofi_stats *out)
{
    size_t sz = out->sz && out->sz < sizeof(*out) ? out->sz : sizeof(*out);
    struct vmt_ofi_stats s;
    uint64_t *src = (uint64_t *)&m->st.starts, *dst = &s.starts;
    for (size_t i = 0; i < (sizeof(s) - offsetof(struct vmt_ofi_stats, starts)) / 8; i++)
        dst[i] = __atomic_load_n(&src[i], __ATOMIC_RELAXED);
    s.sz = sz;
    s.ranges = vmt_ofi_ranges_used(&m->ranges);
    s.evictions = atomic_load(&m->ranges.evictions);
    memcpy(out, &s, sz);
}
