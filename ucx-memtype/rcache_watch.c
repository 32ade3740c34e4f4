/* UCX 1.13's own rcaches, watched: every region UCX registers in an rcache the module does
 * not serve (rcache_native.c) is watched by vmtrack's tracker from before UCX registers it
 * until UCX deregisters it, and every hit is checked.
 *
 * The trackers kmod and uffd only report ranges they watch, and kmod reports asynchronously
 * (the kernel bumps a generation word; vmtrack's own cache compares it on every hit). UCX's
 * rcache has no check on a hit, so the module adds one. Each wrapped rcache
 *   - gets a private vmtrack cache (same tracker kind, no merging) and a device whose
 *     reg/dereg do nothing; the rcache's mem_reg/mem_dereg are wrapped so that before UCX
 *     registers a region the module takes a registration of exactly that range there (the
 *     tracker watches it from before UCX's registration), released after UCX deregisters it;
 *   - has every hit checked: the region the real ucs_rcache_get returns is looked up in that
 *     private cache (a vmtrack hit: one generation-word compare with kmod). If the watch
 *     fired, vmtrack's miss path delivers the event (-> ucm_vm_munmap) and the module drops
 *     the region and asks UCX again, which re-registers. A region that UCX registered in
 *     this very call is fresh by construction and not checked.
 * So UCX hands out a region only if its range was watched continuously since before its
 * registration and no change was reported: what vmtrack's own cache guarantees.
 *
 * With the hooks tracker (SYNC) the wrap's mem_reg takes the registration on the module's
 * hooks cache instead: it waits while an unmap of the range is in flight, so no thread can
 * register the old pages between the event (sent before the system call) and the unmap -
 * a window UCX's own hooks leave open.
 *
 * Only under UCX 1.13 (ucx_release.h): from 1.14 on UCP's hits never call ucs_rcache_get. */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ucm/api/ucm.h>

#include "rcache_watch.h"
#include "ucx_feed.h"
#include "ucx_release.h"
#include "vmtrack.h"

struct wrap {                       /* one per ucs_rcache created while in WATCH mode */
    ucx_rcache_t *rcache;
    struct vmt_cache *wc;           /* WATCH: private watch cache, only this rcache's ranges;
                                     * SYNC: the module's hooks cache */
    int owns_wc;
    struct vmt_device *wd;          /* a do-nothing device on wc */
    _Atomic unsigned gen;           /* fork generation wd was attached in */
    const struct ucx_g1_ops *orig_ops;
    void *orig_ctx;
    size_t tail_off;                /* where our part of the region struct starts */
    struct ucx_g1_ops ops;           /* what UCX calls: ours, forwarding to orig_ops */
};

struct region_tail {                /* appended to every region of a wrapped rcache */
    struct vmt_reg *watch;          /* held from before mem_reg until after mem_dereg */
    unsigned gen;                   /* fork generation the watch belongs to */
};

#define MAX_WRAPS 256

static struct {
    pthread_mutex_t lock;           /* wrap table changes */
    _Atomic(struct wrap *) wraps[MAX_WRAPS];
    _Atomic int nwraps;             /* high-water mark of wraps[] */
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Thread-local: set by our null device's reg (a vmtrack miss happened) and by the mem_reg
 * wrapper (the region UCX registered during the current ucs_rcache_get). */
static __thread int t_watch_miss;
static __thread int t_validating;
static __thread struct ucx_g1_region *t_fresh;

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
        ucx_feed_note_event();
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
        ucx_log(0, "cannot attach the watch device: %s", vmt_strerror(ret));
        w->wd = NULL;
    }
    return ret;
}

/* After fork() the child's caches start with no devices: attach again, once, lazily. */
static struct vmt_device *watch_device(struct wrap *w)
{
    unsigned gen = ucx_feed_fork_gen();
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

/* ---- wrapped rcaches (WATCH mode) ---------------------------------------------------- */
static struct wrap *find_wrap(const ucx_rcache_t *rcache)
{
    int n = atomic_load_explicit(&g.nwraps, memory_order_acquire);
    for (int i = 0; i < n; i++) {
        struct wrap *w = atomic_load_explicit(&g.wraps[i], memory_order_acquire);
        if (w && w->rcache == rcache)
            return w;
    }
    return NULL;
}

static struct region_tail *tail_of(const struct wrap *w, struct ucx_g1_region *region)
{
    return (struct region_tail *)((char *)region + w->tail_off);
}

static ucs_status_t w_mem_reg(void *context, ucx_rcache_t *rcache, void *arg,
                              struct ucx_g1_region *region, uint16_t flags)
{
    struct wrap *w = context;
    struct region_tail *t = tail_of(w, region);
    struct vmt_device *dev = watch_device(w);
    size_t len = region->super.end - region->super.start;
    struct vmt_reg *watch = NULL;
    ucs_status_t st;
    int ret;

    if (!dev) {
        if (!(flags & UCX_G1_MEM_REG_HIDE_ERRORS))
            ucx_log(0, "no watch device (after fork?): refusing to register %#lx+%zu",
                 (unsigned long)region->super.start, len);
        return UCS_ERR_IO_ERROR;
    }
    /* Watch first, then register: a change after this point is reported. (SYNC: this
     * waits while an unmap of the range is in flight, then needs nothing more.) */
    ret = vmt_get(dev, (void *)region->super.start, len, VMT_ACCESS_READ, &watch);
    if (ret < 0) {
        if (!(flags & UCX_G1_MEM_REG_HIDE_ERRORS))
            ucx_log(1, "cannot watch %#lx+%zu: %s", (unsigned long)region->super.start, len,
                 vmt_strerror(ret));
        return vmt_ucx_errno_to_status(ret);
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
    t->gen = ucx_feed_fork_gen();
    t_fresh = region;
    atomic_fetch_add_explicit(&ucx_counters.watches, 1, memory_order_relaxed);
    return UCS_OK;
}

static void w_mem_dereg(void *context, ucx_rcache_t *rcache, struct ucx_g1_region *region)
{
    struct wrap *w = context;
    struct region_tail *t = tail_of(w, region);

    w->orig_ops->mem_dereg(w->orig_ctx, rcache, region);
    /* a watch taken before fork() belongs to the parent's cache: never touch it here */
    if (t->watch && t->gen == ucx_feed_fork_gen())
        vmt_put(t->watch);
    t->watch = NULL;
}

static void w_dump_region(void *context, ucx_rcache_t *rcache, struct ucx_g1_region *region,
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
        vmt_unsubscribe(w->wc, ucx_feed_on_event, NULL);
    /* in a child of fork() the cache belongs to the parent's state: leave it */
    if (atomic_load(&w->gen) == ucx_feed_fork_gen()) {
        if (w->wd)
            vmt_device_detach(w->wd);
        if (w->owns_wc)
            vmt_cache_destroy(w->wc);
    }
    free(w);
}

/* The wrap's watch cache: the shared cache in sync mode, else one of its own on the tracker. */
static ucs_status_t wrap_open_watch(struct wrap *w, const char *name)
{
    if (ucx_feed_mode() == VMT_UCX_SYNC) {
        w->wc = ucx_feed_sync_cache();
        if (attach_watch_device(w) < 0)
            return UCS_ERR_NO_MEMORY;
        atomic_store(&w->gen, ucx_feed_fork_gen());
        return UCS_OK;
    }
    w->owns_wc = 1;
    /* one entry per live UCX region, exactly its range; a do-nothing device pins nothing, so
     * RLIMIT_MEMLOCK must not bound it */
    VMT_OPTS(vmt_cache_opts, o, .tracker = ucx_feed_tracker(), .max_entries = (size_t)1 << 20,
             .max_bytes = SIZE_MAX / 4, .flags = VMT_CACHE_NO_MERGE);
    int ret = vmt_cache_create(&o, &w->wc);
    if (ret == 0)
        ret = attach_watch_device(w);
    if (ret == 0)
        ret = vmt_subscribe(w->wc, ucx_feed_on_event, NULL);
    if (ret < 0) {
        ucx_log(0, "cannot set up a %s watch cache for UCX rcache \"%s\": %s", ucx_feed_tracker(),
             name ? name : "?", vmt_strerror(ret));
        if (w->wc)
            vmt_cache_destroy(w->wc);
        w->wc = NULL;
        return vmt_ucx_errno_to_status(ret);
    }
    atomic_store(&w->gen, ucx_feed_fork_gen());
    return UCS_OK;
}

/* The caller's params with the wrap's ops and context, and room for the region's tail. */
static void wrap_params(struct wrap *w, const struct ucx_g1_params *params,
                        struct ucx_g1_params *p)
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

ucs_status_t ucx_watch_create(const struct ucx_g1_params *params, const char *name,
                              void *stats_parent, ucx_rcache_t **rcache_p)
{
    struct ucx_g1_params p;
    struct wrap *w;
    ucs_status_t st;

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
        ucx_log(0, "more than %d UCX registration caches: refusing to create \"%s\"", MAX_WRAPS,
                name ? name : "?");
        wrap_free(w);
        return UCS_ERR_EXCEEDS_LIMIT;
    }
    st = ucx_real.create(&p, name, stats_parent, &w->rcache);
    if (st != UCS_OK) {
        wrap_free(w);
        return st;
    }
    /* the slot seen free before may have been taken meanwhile */
    if (!publish_wrap(w)) {
        ucx_real.destroy(w->rcache);
        wrap_free(w);
        return UCS_ERR_EXCEEDS_LIMIT;
    }
    atomic_fetch_add_explicit(&ucx_counters.rcaches, 1, memory_order_relaxed);
    *rcache_p = w->rcache;
    return UCS_OK;
}
void ucx_watch_destroy(ucx_rcache_t *rcache)
{
    struct wrap *w = find_wrap(rcache);

    ucx_real.destroy(rcache);               /* deregisters what is left: needs the wrap */
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

ucs_status_t ucx_watch_get(ucx_rcache_t *rcache, void *address, size_t length, int prot,
                              void *arg, struct ucx_g1_region **region_p)
{
    struct wrap *w;
    ucs_status_t st;

    if (ucx_feed_mode() != VMT_UCX_WATCH || !(w = find_wrap(rcache))) {
        ucx_real_resolve();
        return ucx_real.get_g1(rcache, address, length, prot, arg, region_p);
    }

    for (;;) {
        uint64_t seen = ucx_feed_events();
        struct ucx_g1_region *r;
        struct region_tail *t;
        struct vmt_device *dev;
        struct vmt_reg *v = NULL;
        int ret, stale;

        t_fresh = NULL;
        st = ucx_real.get_g1(rcache, address, length, prot, arg, region_p);
        if (st != UCS_OK)
            return st;
        r = *region_p;
        if (r == t_fresh)
            return UCS_OK;          /* registered just now, watched since before */

        t = tail_of(w, r);
        dev = watch_device(w);
        stale = !dev || !t->watch || t->gen != ucx_feed_fork_gen();
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
                ucx_feed_events() == seen)
                return UCS_OK;
        }
        if (stale) {
            /* The region was not watched all along, or its watch fired: make sure every
             * rcache drops it (the event may still be on its way), then ask again. */
            ucm_vm_munmap((void *)r->super.start, r->super.end - r->super.start);
            atomic_fetch_add_explicit(&ucx_counters.stale, 1, memory_order_relaxed);
            ucx_feed_note_event();
        }
        /* else an event arrived while we looked: it may concern this region, look again */
        ucx_real.put(rcache, r);
    }
}

/* The wrap table's lock may have been held by another thread at fork(). */
static void watch_atfork_child(void)
{
    pthread_mutex_init(&g.lock, NULL);
}

__attribute__((constructor)) static void watch_atfork_register(void)
{
    pthread_atfork(NULL, NULL, watch_atfork_child);
}
