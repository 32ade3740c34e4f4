/* libvmtrack-ucx: UCX's registration caches take their memory events from vmtrack.
 *
 * How it works (doc/ucx.md has the long version):
 *
 * 1. Events. UCM_EVENT_VM_UNMAPPED is declared external before any rcache subscribes to it,
 *    so ucm installs no libc hooks for it; a vmtrack subscriber hands each range vmtrack's
 *    tracker reports to ucm_vm_munmap(), which runs every rcache's unmapped callback (the
 *    rcache invalidates at once when it can take its page-table lock, else queues, and every
 *    ucs_rcache_get looks at that queue before looking up). With the hooks tracker the
 *    subscriber runs in the unmapping thread before the system call: the same guarantee UCX's
 *    own hooks give, from the one patcher in the process. The module also wraps each
 *    rcache's mem_reg: before UCX registers a range it does a vmt_get on a private hooks cache,
 *    which waits while an unmap of that range is in flight, so no thread can register the old
 *    pages between the event (sent before the system call) and the unmap itself - a window
 *    UCX's own hooks leave open. At each rcache creation ucm_test_external_events() checks that
 *    the events still arrive (another patcher, e.g. Open MPI's, may have replaced vmtrack's
 *    hooks); if not, the rcache is refused and UCX registers without caching.
 *
 * 2. Watched regions (kmod, uffd). These trackers only report ranges they watch, and the kmod
 *    tracker reports asynchronously (the kernel bumps a generation word; vmtrack's own cache
 *    compares it on every hit). UCX's rcache has no check on a hit, so the module adds one:
 *    it interposes ucs_rcache_create / ucs_rcache_get / ucs_rcache_destroy (exported by libucs
 *    and called through the PLT by libuct and libucp) and
 *      - gives each wrapped rcache a private vmtrack cache (same tracker kind, no merging) and
 *        a device whose reg/dereg do nothing; wraps the rcache's mem_reg/mem_dereg so that
 *        before UCX registers a region the module takes a registration of exactly that range
 *        there (the tracker watches it from before UCX's registration), released after UCX
 *        deregisters the region;
 *      - checks every hit: the region returned by the real ucs_rcache_get is looked up in that
 *        private cache (a vmtrack hit: one generation-word compare with kmod). If the watch
 *        fired, vmtrack's miss path delivers the event (-> ucm_vm_munmap) and the module drops
 *        the region and asks UCX again, which re-registers. A region that UCX registered in
 *        this very call is fresh by construction and not checked.
 *    So UCX hands out a region only if its range was watched continuously since before its
 *    registration and no change was reported: what vmtrack's own cache guarantees.
 *
 * Nothing here allocates or takes a lock inside the event callback beyond what ucm_vm_munmap
 * itself does (UCX's own hooks call the same path from inside munmap). */
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
#include <ucs/memory/rcache.h>

#include "rcache_native.h"
#include "vmtrack.h"
#include "vmtrack_ucx.h"

/* ---- state --------------------------------------------------------------------------- */
struct wrap {                       /* one per ucs_rcache created while in WATCH mode */
    ucs_rcache_t *rcache;
    struct vmt_cache *wc;           /* WATCH: private watch cache, only this rcache's ranges;
                                     * SYNC: the module's hooks cache (g.scache) */
    int owns_wc;
    struct vmt_device *wd;          /* a do-nothing device on wc */
    _Atomic unsigned gen;           /* fork generation wd was attached in */
    const ucs_rcache_ops_t *orig_ops;
    void *orig_ctx;
    size_t tail_off;                /* where our part of the region struct starts */
    ucs_rcache_ops_t ops;           /* what UCX calls: ours, forwarding to orig_ops */
};

struct region_tail {                /* appended to every region of a wrapped rcache */
    struct vmt_reg *watch;          /* held from before mem_reg until after mem_dereg */
    unsigned gen;                   /* fork generation the watch belongs to */
};

#define MAX_WRAPS 256

static struct {
    pthread_mutex_t lock;           /* init, wrap table changes, fork fix-up */
    _Atomic int inited;
    _Atomic int mode;               /* enum vmt_ucx_mode */
    char why[256];
    char tracker[16];
    int loglevel;                   /* 0 error, 1 warn, 2 info, 3 debug */
    struct vmt_cache *shared;
    struct vmt_cache *scache;       /* SYNC: where mem_reg waits for unmaps in flight */
    _Atomic unsigned gen;           /* bumped in the child after fork() */
    _Atomic(struct wrap *) wraps[MAX_WRAPS];
    _Atomic int nwraps;             /* high-water mark of wraps[] */
    _Atomic uint64_t events, event_bytes, rcaches, watches, stale;
} g = { .lock = PTHREAD_MUTEX_INITIALIZER, .loglevel = 1 };

/* Thread-local: set by our null device's reg (a vmtrack miss happened) and by the mem_reg
 * wrapper (the region UCX registered during the current ucs_rcache_get). */
static __thread int t_watch_miss;
static __thread int t_validating;
static __thread ucs_rcache_region_t *t_fresh;

struct vmt_ucx_real vmt_ucx_real;

static void vlog(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));
static void vlog(int level, const char *fmt, ...)
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

void vmt_ucx_resolve_real(void)
{
    struct vmt_ucx_real *r = &vmt_ucx_real;
    if (r->put)
        return;
    r->get = (__typeof__(r->get))dlsym(RTLD_NEXT, "ucs_rcache_get");
    r->create = (__typeof__(r->create))dlsym(RTLD_NEXT, "ucs_rcache_create");
    r->destroy = (__typeof__(r->destroy))dlsym(RTLD_NEXT, "ucs_rcache_destroy");
    r->hold = (__typeof__(r->hold))dlsym(RTLD_NEXT, "ucs_rcache_region_hold");
    r->invalidate = (__typeof__(r->invalidate))dlsym(RTLD_NEXT, "ucs_rcache_region_invalidate");
    r->put = (__typeof__(r->put))dlsym(RTLD_NEXT, "ucs_rcache_region_put");
}

/* ---- events -------------------------------------------------------------------------- */
static void on_event(void *arg, const void *addr, size_t len)
{
    (void)arg;
    if (len == 0)
        return;
    ucm_vm_munmap((void *)addr, len);
    /* counted after delivery: a reader that sees the count unchanged knows UCX has every
     * event counted so far */
    atomic_fetch_add_explicit(&g.event_bytes, len, memory_order_relaxed);
    atomic_fetch_add_explicit(&g.events, 1, memory_order_release);
}

/* ---- the watch device: registrations that only make vmtrack watch a range ------------- */
static int watch_reg(void *ctx, void *addr, size_t len, unsigned access, void **handle)
{
    (void)ctx; (void)access;
    t_watch_miss = 1;
    *handle = NULL;
    if (t_validating) {
        /* A hit check missed: the range was not watched all along, so UCX must drop what it
         * holds there - before the new watch becomes visible, or another thread's check
         * could hit the new watch and trust a region registered before it. */
        ucm_vm_munmap(addr, len);
        atomic_fetch_add_explicit(&g.events, 1, memory_order_release);
    }
    return 0;
}

static void watch_dereg(void *ctx, void *handle)
{
    (void)ctx; (void)handle;
}

static const struct vmt_device_ops watch_ops = {
    .sz = sizeof(struct vmt_device_ops),
    .name = "ucx-watch",
    .reg = watch_reg,
    .dereg = watch_dereg,
};

static int attach_watch_device(struct wrap *w)
{
    int ret = vmt_device_attach(w->wc, &watch_ops, w, &w->wd);
    if (ret < 0) {
        vlog(0, "cannot attach the watch device: %s", vmt_strerror(ret));
        w->wd = NULL;
    }
    return ret;
}

/* After fork() the child's caches start with no devices: attach again, once, lazily. */
static struct vmt_device *watch_device(struct wrap *w)
{
    unsigned gen = atomic_load_explicit(&g.gen, memory_order_acquire);
    if (__builtin_expect(atomic_load_explicit(&w->gen, memory_order_acquire) != gen, 0)) {
        pthread_mutex_lock(&g.lock);
        if (atomic_load(&w->gen) != gen) {
            attach_watch_device(w);
            atomic_store(&w->gen, gen);
        }
        pthread_mutex_unlock(&g.lock);
    }
    return w->wd;
}

static void atfork_child(void)
{
    pthread_mutex_init(&g.lock, NULL);
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

static int init_locked(void)
{
    const char *env = getenv("VMTRACK_UCX");
    const char *tracker;
    int ret;

    g.loglevel = parse_loglevel();
    vmt_ucx_resolve_real();
    if (!vmt_ucx_real.get || !vmt_ucx_real.create || !vmt_ucx_real.destroy) {
        set_off("libucs's ucs_rcache_get/create/destroy not found after this module");
        vlog(0, "%s", g.why);
        return -ENOENT;
    }

    if (env && *env && strcmp(env, "1") && strcmp(env, "on") && strcmp(env, "yes")) {
        if (!strcmp(env, "0") || !strcmp(env, "off") || !strcmp(env, "no")) {
            set_off("VMTRACK_UCX=%s: UCX keeps its own hooks", env);
            vlog(2, "%s", g.why);
            return -ECANCELED;
        }
        set_off("VMTRACK_UCX=%s is not 1 or 0: module off, UCX keeps its own hooks", env);
        vlog(0, "%s", g.why);
        return -EINVAL;
    }

    /* UCX 1.13 in bistro mode (its default on x86-64) patches libc's mmap, munmap, mremap,
     * shmat, shmdt, brk, sbrk and madvise from libucs's constructor, before this module's
     * constructor can run: only UCX_MEM_MMAP_HOOK_MODE=none in the environment prevents it.
     * Two patchers in one process are not an option, so then the module stays off. */
    if (ucm_global_opts.enable_events && ucm_global_opts.mmap_hook_mode == UCM_MMAP_HOOK_BISTRO) {
        set_off("UCX's ucm already patched libc at startup (UCX_MEM_MMAP_HOOK_MODE=%s): start "
                "the process with UCX_MEM_MMAP_HOOK_MODE=none to use vmtrack; UCX keeps its "
                "own hooks", getenv("UCX_MEM_MMAP_HOOK_MODE") ? getenv("UCX_MEM_MMAP_HOOK_MODE")
                                                               : "bistro (default)");
        vlog(1, "%s", g.why);
        return -EBUSY;
    }
    if (!ucm_global_opts.enable_events) {
        set_off("UCX_MEM_EVENTS=no: UCX's registration caches are off, nothing to feed");
        vlog(2, "%s", g.why);
        return -ENOTSUP;
    }

    g.shared = vmt_shared();
    if (!g.shared) {
        ret = errno ? -errno : -EIO;
        set_off("vmt_shared() failed (%s; VMTRACK_TRACKER=%s): UCX keeps its own hooks",
                strerror(-ret), getenv("VMTRACK_TRACKER") ? getenv("VMTRACK_TRACKER") : "auto");
        vlog(0, "%s", g.why);
        return ret;
    }
    tracker = vmt_cache_tracker(g.shared);
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
            vlog(0, "%s", g.why);
            return ret;
        }
        atomic_store(&g.mode, VMT_UCX_SYNC);
    } else if (!strcmp(tracker, "kmod") || !strcmp(tracker, "uffd")) {
        atomic_store(&g.mode, VMT_UCX_WATCH);
    } else {
        set_off("vmtrack's tracker is \"%s\", which reports no address-space events: UCX "
                "keeps its own hooks", tracker);
        vlog(2, "%s", g.why);
        return -ENOTSUP;
    }

    ret = vmt_subscribe(g.shared, on_event, NULL);
    if (ret < 0) {
        set_off("vmt_subscribe failed (%s): UCX keeps its own hooks", vmt_strerror(ret));
        vlog(0, "%s", g.why);
        return ret;
    }

    /* From here on UCX's caches get their unmap events from us, not from ucm's hooks. */
    ucm_set_external_event(UCM_EVENT_VM_UNMAPPED);
    if (ucm_global_opts.mmap_hook_mode != UCM_MMAP_HOOK_NONE) {
        /* reloc mode patches only when a handler needs it: make sure none ever does */
        ucm_global_config_t opts = ucm_global_opts;
        opts.mmap_hook_mode = UCM_MMAP_HOOK_NONE;
        ucm_set_global_opts(&opts);
    }
    snprintf(g.tracker, sizeof(g.tracker), "%s", tracker);
    snprintf(g.why, sizeof(g.why), "%s",
             atomic_load(&g.mode) == VMT_UCX_SYNC
                 ? "UCX's caches get every unmap from vmtrack's hooks, before the system call"
                 : "UCX's regions are watched by vmtrack's tracker and checked on every hit");
    pthread_atfork(NULL, NULL, atfork_child);
    vlog(2, "on, tracker %s: %s", g.tracker, g.why);
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
    v.rcaches = atomic_load(&g.rcaches);
    v.watches = atomic_load(&g.watches);
    v.stale = atomic_load(&g.stale);
    vmt_ucx_native_counts(&v.native_rcaches, &v.forwarded_rcaches);
    memcpy(s, &v, v.sz);
    return 0;
}

/* ---- wrapped rcaches (WATCH mode) ---------------------------------------------------- */
static struct wrap *find_wrap(const ucs_rcache_t *rcache)
{
    int n = atomic_load_explicit(&g.nwraps, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        struct wrap *w = atomic_load_explicit(&g.wraps[i], memory_order_acquire);
        if (w && w->rcache == rcache)
            return w;
    }
    return NULL;
}

static struct region_tail *tail_of(const struct wrap *w, ucs_rcache_region_t *region)
{
    return (struct region_tail *)((char *)region + w->tail_off);
}

static ucs_status_t errno_to_status(int ret)
{
    switch (ret) {
    case -EFAULT: return UCS_ERR_INVALID_ADDR;
    case -ENOMEM: return UCS_ERR_NO_MEMORY;
    case -ENOSPC: return UCS_ERR_EXCEEDS_LIMIT;
    case -EINVAL: return UCS_ERR_INVALID_PARAM;
    default: return UCS_ERR_IO_ERROR;
    }
}

static ucs_status_t w_mem_reg(void *context, ucs_rcache_t *rcache, void *arg,
                              ucs_rcache_region_t *region, uint16_t flags)
{
    struct wrap *w = context;
    struct region_tail *t = tail_of(w, region);
    struct vmt_device *dev = watch_device(w);
    size_t len = region->super.end - region->super.start;
    struct vmt_reg *watch = NULL;
    ucs_status_t st;
    int ret;

    if (!dev) {
        if (!(flags & UCS_RCACHE_MEM_REG_HIDE_ERRORS))
            vlog(0, "no watch device (after fork?): refusing to register %#lx+%zu",
                 (unsigned long)region->super.start, len);
        return UCS_ERR_IO_ERROR;
    }
    /* Watch first, then register: a change after this point is reported. (SYNC: this
     * waits while an unmap of the range is in flight, then needs nothing more.) */
    ret = vmt_get(dev, (void *)region->super.start, len, VMT_ACCESS_READ, &watch);
    if (ret < 0) {
        if (!(flags & UCS_RCACHE_MEM_REG_HIDE_ERRORS))
            vlog(1, "cannot watch %#lx+%zu: %s", (unsigned long)region->super.start, len,
                 vmt_strerror(ret));
        return errno_to_status(ret);
    }
    if (!w->owns_wc) {
        vmt_put(watch);
        t->watch = NULL;
        return w->orig_ops->mem_reg(w->orig_ctx, rcache, arg, region, flags);
    }
    st = w->orig_ops->mem_reg(w->orig_ctx, rcache, arg, region, flags);
    if (st != UCS_OK) {
        vmt_put(watch);
        return st;
    }
    t->watch = watch;
    t->gen = atomic_load(&g.gen);
    t_fresh = region;
    atomic_fetch_add_explicit(&g.watches, 1, memory_order_relaxed);
    return UCS_OK;
}

static void w_mem_dereg(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *region)
{
    struct wrap *w = context;
    struct region_tail *t = tail_of(w, region);

    w->orig_ops->mem_dereg(w->orig_ctx, rcache, region);
    /* a watch taken before fork() belongs to the parent's cache: never touch it here */
    if (t->watch && t->gen == atomic_load(&g.gen))
        vmt_put(t->watch);
    t->watch = NULL;
}

static void w_dump_region(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *region,
                          char *buf, size_t max)
{
    struct wrap *w = context;
    if (w->orig_ops->dump_region)
        w->orig_ops->dump_region(w->orig_ctx, rcache, region, buf, max);
    else if (max)
        buf[0] = '\0';
}

static void wrap_free(struct wrap *w)
{
    if (w->owns_wc)
        vmt_unsubscribe(w->wc, on_event, NULL);
    /* in a child of fork() the cache belongs to the parent's state: leave it */
    if (atomic_load(&w->gen) == atomic_load(&g.gen)) {
        if (w->wd)
            vmt_device_detach(w->wd);
        if (w->owns_wc)
            vmt_cache_destroy(w->wc);
    }
    free(w);
}

/* Another patcher may have replaced vmtrack's hooks since (Open MPI's memory patcher does, in
 * MPI_Init, unless --mca memory ^patcher): then an rcache would never hear of an unmap. ucm's
 * own check fires real mmap/munmap/mremap/shm calls in this thread and sees whether the events
 * arrive. */
static int unmap_events_reach_ucx(const char *name)
{
    ucs_status_t t = ucm_test_external_events(UCM_EVENT_VM_UNMAPPED);
    if (t == UCS_OK)
        return 1;
    vlog(0, "unmap events do not reach UCX (%s): another patcher replaced vmtrack's "
            "hooks (in Open MPI: --mca memory ^patcher); refusing registration cache "
            "\"%s\", UCX will register without caching", ucs_status_string(t),
         name ? name : "?");
    return 0;
}

/* The wrap's watch cache: the shared cache in sync mode, else one of its own on the tracker. */
static ucs_status_t wrap_open_watch(struct wrap *w, const char *name)
{
    if (atomic_load(&g.mode) == VMT_UCX_SYNC) {
        w->wc = g.scache;
        if (attach_watch_device(w) < 0)
            return UCS_ERR_NO_MEMORY;
        atomic_store(&w->gen, atomic_load(&g.gen));
        return UCS_OK;
    }
    w->owns_wc = 1;
    /* one entry per live UCX region, exactly its range; a do-nothing device pins nothing, so
     * RLIMIT_MEMLOCK must not bound it */
    VMT_OPTS(vmt_cache_opts, o, .tracker = g.tracker, .max_entries = (size_t)1 << 20,
             .max_bytes = SIZE_MAX / 4, .flags = VMT_CACHE_NO_MERGE);
    int ret = vmt_cache_create(&o, &w->wc);
    if (ret == 0)
        ret = attach_watch_device(w);
    if (ret == 0)
        ret = vmt_subscribe(w->wc, on_event, NULL);
    if (ret < 0) {
        vlog(0, "cannot set up a %s watch cache for UCX rcache \"%s\": %s", g.tracker,
             name ? name : "?", vmt_strerror(ret));
        if (w->wc)
            vmt_cache_destroy(w->wc);
        w->wc = NULL;
        return errno_to_status(ret);
    }
    atomic_store(&w->gen, atomic_load(&g.gen));
    return UCS_OK;
}

/* The caller's params with the wrap's ops and context, and room for the region's tail. */
static void wrap_params(struct wrap *w, const ucs_rcache_params_t *params,
                        ucs_rcache_params_t *p)
{
    *p = *params;
    w->orig_ops = params->ops;
    w->orig_ctx = params->context;
    w->tail_off = (params->region_struct_size + _Alignof(struct region_tail) - 1) /
                  _Alignof(struct region_tail) * _Alignof(struct region_tail);
    w->ops.mem_reg = w_mem_reg;
    w->ops.mem_dereg = w_mem_dereg;
    w->ops.dump_region = w_dump_region;
    p->ops = &w->ops;
    p->context = w;
    p->region_struct_size = w->tail_off + sizeof(struct region_tail);
    if (w->owns_wc) {
        /* vmtrack watches whole pages. UCX's ib md aligns regions to 16 bytes, so two of its
         * regions may share a page; their watches would then overlap and, in a cache that
         * does not merge, drop each other on every registration. Page-aligned regions never
         * share a page (UCX merges overlapping ones), and ibv_reg_mr pins whole pages anyway. */
        size_t page = (size_t)sysconf(_SC_PAGESIZE);
        if (p->alignment < page && p->max_alignment >= page)
            p->alignment = page;
    }
}

/* A free slot of g.wraps, or -1 (g.lock held). */
static int free_wrap_slot(void)
{
    for (int i = 0; i < MAX_WRAPS; i++)
        if (atomic_load(&g.wraps[i]) == NULL)
            return i;
    return -1;
}

/* Publish w in a free slot; false if none is left. */
static int publish_wrap(struct wrap *w)
{
    pthread_mutex_lock(&g.lock);
    int slot = free_wrap_slot();
    if (slot >= 0) {
        atomic_store_explicit(&g.wraps[slot], w, memory_order_release);
        if (slot + 1 > atomic_load(&g.nwraps))
            atomic_store_explicit(&g.nwraps, slot + 1, memory_order_release);
    }
    pthread_mutex_unlock(&g.lock);
    return slot >= 0;
}

VMT_UCX_EXPORT ucs_status_t ucs_rcache_create(const ucs_rcache_params_t *params,
                                              const char *name, ucs_stats_node_t *stats_parent,
                                              ucs_rcache_t **rcache_p)
{
    ucs_rcache_params_t p;
    struct wrap *w;
    ucs_status_t st;

    vmt_ucx_init();
    if (!vmt_ucx_real.create)
        return UCS_ERR_UNSUPPORTED;
    if (atomic_load(&g.mode) == VMT_UCX_OFF || !vmt_ucx_params_valid(params) ||
        !(params->ucm_events & UCM_EVENT_VM_UNMAPPED)) {
        vmt_ucx_note_forwarded();
        return vmt_ucx_real.create(params, name, stats_parent, rcache_p);
    }
    /* Without unmap events, refuse: UCX then registers without a cache (slow, never stale). */
    if (atomic_load(&g.mode) == VMT_UCX_SYNC && !unmap_events_reach_ucx(name))
        return UCS_ERR_UNSUPPORTED;
    int native = vmt_ucx_native_create(params, name, rcache_p);
    if (native > 0)
        return UCS_OK;
    if (native < 0)
        return UCS_ERR_NO_MEMORY;
    vmt_ucx_note_forwarded();

    w = calloc(1, sizeof(*w));
    if (!w)
        return UCS_ERR_NO_MEMORY;
    st = wrap_open_watch(w, name);
    if (st != UCS_OK) {
        free(w);
        return st;
    }
    wrap_params(w, params, &p);
    pthread_mutex_lock(&g.lock);
    int room = free_wrap_slot() >= 0;
    pthread_mutex_unlock(&g.lock);
    if (!room) {
        vlog(0, "more than %d UCX registration caches: refusing to create \"%s\"", MAX_WRAPS,
             name ? name : "?");
        wrap_free(w);
        return UCS_ERR_EXCEEDS_LIMIT;
    }
    st = vmt_ucx_real.create(&p, name, stats_parent, &w->rcache);
    if (st != UCS_OK) {
        wrap_free(w);
        return st;
    }
    /* the slot seen free before may have been taken meanwhile */
    if (!publish_wrap(w)) {
        vmt_ucx_real.destroy(w->rcache);
        wrap_free(w);
        return UCS_ERR_EXCEEDS_LIMIT;
    }
    atomic_fetch_add_explicit(&g.rcaches, 1, memory_order_relaxed);
    *rcache_p = w->rcache;
    return UCS_OK;
}

VMT_UCX_EXPORT void ucs_rcache_destroy(ucs_rcache_t *rcache)
{
    struct wrap *w;

    if (vmt_ucx_native_destroy(rcache))
        return;
    vmt_ucx_resolve_real();
    w = find_wrap(rcache);
    vmt_ucx_real.destroy(rcache);           /* deregisters what is left: needs the wrap */
    if (!w)
        return;
    pthread_mutex_lock(&g.lock);
    for (int i = 0; i < MAX_WRAPS; i++)
        if (atomic_load(&g.wraps[i]) == w)
            atomic_store(&g.wraps[i], NULL);
    pthread_mutex_unlock(&g.lock);
    /* a concurrent ucs_rcache_get on a cache being destroyed is a caller bug, as in UCX */
    wrap_free(w);
}

/* ucs_rcache_get of an rcache that is not native (rcache_native.c serves the native ones) */
ucs_status_t vmt_ucx_feed_get(ucs_rcache_t *rcache, void *address, size_t length, int prot,
                              void *arg, ucs_rcache_region_t **region_p)
{
    struct wrap *w;
    ucs_status_t st;

    if (atomic_load_explicit(&g.mode, memory_order_relaxed) != VMT_UCX_WATCH ||
        !(w = find_wrap(rcache))) {
        if (!vmt_ucx_real.get)
            vmt_ucx_resolve_real();
        return vmt_ucx_real.get(rcache, address, length, prot, arg, region_p);
    }

    for (;;) {
        uint64_t seen = atomic_load_explicit(&g.events, memory_order_acquire);
        ucs_rcache_region_t *r;
        struct region_tail *t;
        struct vmt_device *dev;
        struct vmt_reg *v = NULL;
        int ret, stale;

        t_fresh = NULL;
        st = vmt_ucx_real.get(rcache, address, length, prot, arg, region_p);
        if (st != UCS_OK)
            return st;
        r = *region_p;
        if (r == t_fresh)
            return UCS_OK;          /* registered just now, watched since before */

        t = tail_of(w, r);
        dev = watch_device(w);
        stale = !dev || !t->watch || t->gen != atomic_load(&g.gen);
        if (!stale) {
            /* A vmtrack hit checks the watch (kmod: the generation word). If it fired,
             * vmtrack's miss path delivers the event to UCX and our device sees a miss. */
            t_watch_miss = 0;
            t_validating = 1;
            ret = vmt_get(dev, (void *)r->super.start, r->super.end - r->super.start,
                          VMT_ACCESS_READ, &v);
            t_validating = 0;
            if (ret == 0)
                vmt_put(v);
            stale = ret < 0 || t_watch_miss;
            if (!stale &&
                atomic_load_explicit(&g.events, memory_order_acquire) == seen)
                return UCS_OK;
        }
        if (stale) {
            /* The region was not watched all along, or its watch fired: make sure every
             * rcache drops it (the event may still be on its way), then ask again. */
            ucm_vm_munmap((void *)r->super.start, r->super.end - r->super.start);
            atomic_fetch_add_explicit(&g.stale, 1, memory_order_relaxed);
            atomic_fetch_add_explicit(&g.events, 1, memory_order_release);
        }
        /* else an event arrived while we looked: it may concern this region, look again */
        ucs_rcache_region_put(rcache, r);
    }
}
