/* UCX's own rcaches, watched: every region UCX registers in an rcache the module does not
 * serve (rcache_native.c) is watched by vmtrack's tracker from before UCX registers it until
 * UCX deregisters it, and every hit is checked.
 *
 * The trackers kmod and uffd only report ranges they watch, and kmod reports asynchronously
 * (the kernel bumps a generation word; vmtrack's own cache compares it on every hit). UCX's
 * rcache has no check on a hit, so the module adds one. Each wrapped rcache
 *   - gets a private vmtrack cache (same tracker kind, no merging) and a device whose
 *     reg/dereg do nothing; the rcache's mem_reg/mem_dereg are wrapped so that before UCX
 *     registers a region the module takes a registration of exactly that range there (the
 *     tracker watches it from before UCX's registration), released after UCX deregisters it;
 *   - has every hit checked: the region found is looked up in that private cache (a vmtrack
 *     hit: one generation-word compare with kmod). If the watch fired, vmtrack's miss path
 *     delivers the event (-> ucm_vm_munmap) and the module makes UCX drop the region and
 *     register anew. A region that UCX registered in this very call is fresh by
 *     construction and not checked.
 * So UCX hands out a region only if its range was watched continuously since before its
 * registration and no change was reported: what vmtrack's own cache guarantees.
 *
 * Where the hits are checked:
 *   - ucs_rcache_get (every release): the region libucs returns, before the caller sees it;
 *     a stale one is put back and asked for again.
 *   - ucs_pgtable_lookup (1.14 on): UCP's cache hits are inline code in libucp
 *     (ucs_rcache_lookup_unsafe) that never calls ucs_rcache_get, but each calls
 *     ucs_pgtable_lookup through libucp's PLT. For a page table of a wrapped rcache the
 *     module checks the region found and, if stale, returns NULL: UCP takes its slow path
 *     (ucs_rcache_get, checked as above), where libucs drains the invalidation the check
 *     queued and registers the range anew. The page table of an rcache is learnt when
 *     libucs's ucs_rcache_create initialises it (ucs_pgtable_init, also through the PLT);
 *     where that is not seen the rcache is refused (UCX then registers per operation).
 *     Locks: UCP calls the lookup under its own context lock only; libucs's
 *     ucs_rcache_get calls it with the page-table lock held for reading, and there the
 *     module does not check (the get's own check follows). Delivering a change is
 *     ucm_vm_munmap: UCX's unmap callback queues the range under the rcache's spinlock (1.17
 *     on, SYNC_EVENTS) or takes the page-table lock only with trywrlock, and defers every
 *     deregistration to the next get: nothing the lookup's caller holds is waited for.
 *
 * With the hooks tracker (SYNC) the wrap's mem_reg takes the registration on the module's
 * hooks cache instead: it waits while an unmap of the range is in flight, so no thread can
 * register the old pages between the event (sent before the system call) and the unmap -
 * a window UCX's own hooks leave open. Only UCX 1.13 wraps rcaches in SYNC mode.
 *
 * The rcache layouts of each release come from ucx_release.c. */
#define _GNU_SOURCE
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <pthread.h>
#include <stdio.h>
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

typedef void (*ucx_fn)(void);
typedef ucs_status_t (*mem_reg_fn)(void *ctx, ucx_rcache_t *rc, void *arg, void *region,
                                   uint16_t flags);
typedef void (*mem_dereg_fn)(void *ctx, ucx_rcache_t *rc, void *region);
typedef void (*merge_fn)(void *ctx, ucx_rcache_t *rc, void *arg, void *region);
typedef void (*dump_fn)(void *ctx, ucx_rcache_t *rc, void *region, char *buf, size_t max);

struct pgt_region {                 /* ucs_pgt_region_t, first in every release's region */
    uint64_t start, end;
};

#define MAX_OPS 4

struct wrap {                       /* one per ucs_rcache created while in WATCH mode */
    ucx_rcache_t *rcache;
    struct vmt_cache *wc;           /* WATCH: private watch cache, only this rcache's ranges;
                                     * SYNC: the module's hooks cache */
    int owns_wc;
    struct vmt_device *wd;          /* a do-nothing device on wc */
    _Atomic unsigned gen;           /* fork generation wd was attached in */
    const ucx_fn *orig_ops;         /* the caller's ucs_rcache_ops_t, as an array */
    void *orig_ctx;
    size_t tail_off;                /* where our part of the region struct starts */
    const void *pgtable;            /* the rcache's page table (1.14 on) */
    ucx_fn ops[MAX_OPS];            /* what UCX calls: ours, forwarding to orig_ops */
};

struct region_tail {                /* appended to every region of a wrapped rcache */
    struct vmt_reg *watch;          /* held from before mem_reg until after mem_dereg */
    unsigned gen;                   /* fork generation the watch belongs to */
};

#define MAX_WRAPS 256

static struct {
    pthread_mutex_t lock;           /* wrap table changes */
    _Atomic(struct wrap *) wraps[MAX_WRAPS];
    _Atomic(const void *) pgtables[MAX_WRAPS];  /* wraps[i]'s page table, for the lookup */
    _Atomic int nwraps;             /* high-water mark of wraps[] */
    _Atomic int lookups_checked;    /* 1.14 on in WATCH mode: ucs_pgtable_lookup checks */
    void *(*lookup)(const void *pgtable, uintptr_t address);
    ucs_status_t (*pgt_init)(void *pgtable, void *alloc_cb, void *release_cb);
} g = {.lock = PTHREAD_MUTEX_INITIALIZER};

/* Thread-local: set by our null device's reg (a vmtrack miss happened), by the mem_reg
 * wrapper (the region UCX registered during the current ucs_rcache_get), inside the module's
 * ucs_rcache_get (no lookup check there), and inside ucs_rcache_create (whose page table
 * ucs_pgtable_init names). */
static __thread int t_watch_miss;
static __thread int t_validating;
static __thread int t_in_get;
static __thread void *t_fresh;
static __thread struct wrap *t_creating;

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

/* The wrap whose page table this is; the page tables are compared in an array that is never
 * freed, so a lookup in another rcache never reads a wrap being destroyed. */
static struct wrap *find_wrap_of_pgtable(const void *pgtable)
{
    int n = atomic_load_explicit(&g.nwraps, memory_order_acquire);
    for (int i = 0; i < n; i++)
        if (atomic_load_explicit(&g.pgtables[i], memory_order_relaxed) == pgtable)
            return atomic_load_explicit(&g.wraps[i], memory_order_acquire);
    return NULL;
}

static struct region_tail *tail_of(const struct wrap *w, void *region)
{
    return (struct region_tail *)((char *)region + w->tail_off);
}

static ucs_status_t w_mem_reg(void *context, ucx_rcache_t *rcache, void *arg, void *region,
                              uint16_t flags)
{
    struct wrap *w = context;
    struct region_tail *t = tail_of(w, region);
    struct vmt_device *dev = watch_device(w);
    struct pgt_region *pr = region;
    mem_reg_fn orig = (mem_reg_fn)w->orig_ops[0];
    size_t len = pr->end - pr->start;
    struct vmt_reg *watch = NULL;
    ucs_status_t st;
    int ret;

    if (!dev) {
        if (!(flags & UCX_G1_MEM_REG_HIDE_ERRORS))
            ucx_log(0, "no watch device (after fork?): refusing to register %#lx+%zu",
                 (unsigned long)pr->start, len);
        return UCS_ERR_IO_ERROR;
    }
    /* Watch first, then register: a change after this point is reported. (SYNC: this
     * waits while an unmap of the range is in flight, then needs nothing more.) */
    ret = vmt_get(dev, (void *)pr->start, len, VMT_ACCESS_READ, &watch);
    if (ret < 0) {
        if (!(flags & UCX_G1_MEM_REG_HIDE_ERRORS))
            ucx_log(1, "cannot watch %#lx+%zu: %s", (unsigned long)pr->start, len,
                 vmt_strerror(ret));
        return vmt_ucx_errno_to_status(ret);
    }
    if (!w->owns_wc) {
        vmt_put(watch);
        t->watch = NULL;
        return orig(w->orig_ctx, rcache, arg, region, flags);
    }
    st = orig(w->orig_ctx, rcache, arg, region, flags);
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

static void w_mem_dereg(void *context, ucx_rcache_t *rcache, void *region)
{
    struct wrap *w = context;
    struct region_tail *t = tail_of(w, region);

    ((mem_dereg_fn)w->orig_ops[1])(w->orig_ctx, rcache, region);
    /* a watch taken before fork() belongs to the parent's cache: never touch it here */
    if (t->watch && t->gen == ucx_feed_fork_gen())
        vmt_put(t->watch);
    t->watch = NULL;
}

/* 1.18 on: a region merged into a new one (libucs drops it after; its watch goes then) */
static void w_merge(void *context, ucx_rcache_t *rcache, void *arg, void *region)
{
    struct wrap *w = context;
    merge_fn orig = (merge_fn)w->orig_ops[ucx_release_layout()->merge];
    if (orig)
        orig(w->orig_ctx, rcache, arg, region);
}

static void w_dump_region(void *context, ucx_rcache_t *rcache, void *region, char *buf,
                          size_t max)
{
    struct wrap *w = context;
    dump_fn orig = (dump_fn)w->orig_ops[ucx_release_layout()->dump_region];
    if (orig)
        orig(w->orig_ctx, rcache, region, buf, max);
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

static void set_field(void *params, size_t off, const void *v, size_t len)
{
    memcpy((char *)params + off, v, len);
}

/* The caller's params (copied into p, the release's size) with the wrap's ops and context,
 * and room for the region's tail. */
static void wrap_params(struct wrap *w, const struct ucx_layout *l, const void *params, void *p)
{
    const ucx_fn *ops;
    void *ctx = w;
    size_t size;

    memcpy(p, params, l->params_size);
    memcpy(&size, (const char *)params + l->region_struct_size, sizeof(size));
    memcpy(&ops, (const char *)params + l->ops, sizeof(ops));
    memcpy(&w->orig_ctx, (const char *)params + l->context, sizeof(w->orig_ctx));
    w->orig_ops = ops;
    w->tail_off = (size + _Alignof(struct region_tail) - 1) / _Alignof(struct region_tail) *
                  _Alignof(struct region_tail);
    w->ops[0] = (ucx_fn)w_mem_reg;
    w->ops[1] = (ucx_fn)w_mem_dereg;
    if (l->merge >= 0)
        w->ops[l->merge] = (ucx_fn)w_merge;
    w->ops[l->dump_region] = (ucx_fn)w_dump_region;
    ops = w->ops;
    set_field(p, l->ops, &ops, sizeof(ops));
    set_field(p, l->context, &ctx, sizeof(ctx));
    size = w->tail_off + sizeof(struct region_tail);
    set_field(p, l->region_struct_size, &size, sizeof(size));
    if (w->owns_wc && l->alignment != SIZE_MAX) {
        /* vmtrack watches whole pages. UCX's ib md aligns regions to 16 bytes, so two of its
         * regions may share a page; their watches would then overlap and, in a cache that
         * does not merge, drop each other on every registration. Page-aligned regions never
         * share a page (UCX merges overlapping ones), and ibv_reg_mr pins whole pages anyway.
         * From 1.17 on the alignment is ucs_rcache_get's argument (ucx_watch_get). */
        size_t page = (size_t)sysconf(_SC_PAGESIZE), align, max_align;
        memcpy(&align, (char *)p + l->alignment, sizeof(align));
        memcpy(&max_align, (char *)p + l->max_alignment, sizeof(max_align));
        if (align < page && max_align >= page)
            set_field(p, l->alignment, &page, sizeof(page));
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
        atomic_store_explicit(&g.pgtables[slot], w->pgtable, memory_order_release);
        if (slot + 1 > atomic_load(&g.nwraps))
            atomic_store_explicit(&g.nwraps, slot + 1, memory_order_release);
    }
    pthread_mutex_unlock(&g.lock);
    return slot >= 0;
}

/* The rcache exists; 1.14 on it is usable only if its page table was seen (every UCP hit is
 * checked there). Else it is destroyed again and refused: UCX registers per operation. */
static ucs_status_t wrap_check_pgtable(struct wrap *w, const char *name)
{
    static _Atomic int said;

    if (ucx_release()->support == UCX_SERVE || w->pgtable)
        return UCS_OK;
    if (!atomic_exchange(&said, 1))
        ucx_log(0, "UCX %s: the page table of UCX's registration cache \"%s\" was not seen "
                "(libucs calls ucs_pgtable_init without its PLT?), so UCP's hits could not "
                "be checked: refusing it, UCX registers per operation", ucx_release()->name,
                name ? name : "?");
    atomic_fetch_add(&ucx_counters.refused, 1);
    ucx_real.destroy(w->rcache);
    return UCS_ERR_UNSUPPORTED;
}

ucs_status_t ucx_watch_create(const void *params, const char *name, void *stats_parent,
                              ucx_rcache_t **rcache_p)
{
    const struct ucx_layout *l = ucx_release_layout();
    unsigned char p[128];
    struct wrap *w;
    ucs_status_t st;

    _Static_assert(sizeof(p) >= 80, "room for every release's params");
    if (!l || l->params_size > sizeof(p) || l->nops > MAX_OPS)
        return UCS_ERR_UNSUPPORTED;
    w = calloc(1, sizeof(*w));
    if (!w)
        return UCS_ERR_NO_MEMORY;
    st = wrap_open_watch(w, name);
    if (st != UCS_OK) {
        free(w);
        return st;
    }
    wrap_params(w, l, params, p);
    pthread_mutex_lock(&g.lock);
    int room = free_wrap_slot() >= 0;
    pthread_mutex_unlock(&g.lock);
    if (!room) {
        ucx_log(0, "more than %d UCX registration caches: refusing to create \"%s\"", MAX_WRAPS,
                name ? name : "?");
        wrap_free(w);
        return UCS_ERR_EXCEEDS_LIMIT;
    }
    if (ucx_release()->support == UCX_CHECK) {
        /* ucx_feed.c chose WATCH only where libucs has the page-table functions and the
         * process's lookups reach this module */
        atomic_store(&g.lookups_checked, 1);
    }
    t_creating = w;
    st = ucx_real.create(p, name, stats_parent, &w->rcache);
    t_creating = NULL;
    if (st == UCS_OK)
        st = wrap_check_pgtable(w, name);
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
        if (atomic_load(&g.wraps[i]) == w) {
            atomic_store(&g.pgtables[i], NULL);
            atomic_store(&g.wraps[i], NULL);
        }
    pthread_mutex_unlock(&g.lock);
    /* a concurrent ucs_rcache_get on a cache being destroyed is a caller bug, as in UCX */
    wrap_free(w);
}

/* ---- the check of a hit ------------------------------------------------------------- */
enum freshness { FRESH, STALE, LOOK_AGAIN };

/* Whether region r of w may be handed out: FRESH if its watch has been in place since before
 * UCX registered it and has not fired; STALE (the change given to UCX: every rcache drops the
 * range) if not; LOOK_AGAIN if an event arrived while we looked, which may concern it. */
static enum freshness region_fresh(struct wrap *w, void *r)
{
    uint64_t seen = ucx_feed_events();
    struct region_tail *t = tail_of(w, r);
    struct pgt_region *pr = r;
    struct vmt_device *dev = watch_device(w);
    struct vmt_reg *v = NULL;
    int stale, ret;

    stale = !dev || !t->watch || t->gen != ucx_feed_fork_gen();
    if (!stale) {
        /* A vmtrack hit checks the watch (kmod: the generation word). If it fired,
         * vmtrack's miss path delivers the event to UCX and our device sees a miss. */
        t_watch_miss = 0;
        t_validating = 1;
        ret = vmt_get(dev, (void *)pr->start, pr->end - pr->start, VMT_ACCESS_READ, &v);
        t_validating = 0;
        if (ret == 0)
            vmt_put(v);
        stale = ret < 0 || t_watch_miss;
        if (!stale)
            return ucx_feed_events() == seen ? FRESH : LOOK_AGAIN;
    }
    /* The region was not watched all along, or its watch fired: make sure every rcache drops
     * it (the event may still be on its way). */
    ucm_vm_munmap((void *)pr->start, pr->end - pr->start);
    atomic_fetch_add_explicit(&ucx_counters.stale, 1, memory_order_relaxed);
    ucx_feed_note_event();
    return STALE;
}

/* ucs_rcache_get with the caller's arguments as its release passed them (rcache_native.c's
 * export): 1.13-1.16 (rcache, address, length, int prot, arg, region_p), 1.17 on (rcache,
 * address, length, size_t alignment, int prot, arg, region_p). A wrapped rcache's region is
 * checked before the caller sees it. */
ucs_status_t ucx_watch_get(ucx_rcache_t *rcache, void *address, size_t length, uintptr_t a3,
                           uintptr_t a4, uintptr_t a5, uintptr_t a6)
{
    int with_alignment = ucx_release()->api != UCX_RCACHE_API_113;
    void **region_p = (void **)(with_alignment ? a6 : a5);
    struct wrap *w;
    ucs_status_t st;

    ucx_real_resolve();
    if (ucx_feed_mode() != VMT_UCX_WATCH || !(w = find_wrap(rcache)))
        return ucx_real.get_raw(rcache, address, length, a3, a4, a5, a6);
    if (with_alignment && a3 < (uintptr_t)sysconf(_SC_PAGESIZE))
        a3 = (uintptr_t)sysconf(_SC_PAGESIZE);      /* whole pages: see wrap_params */

    for (;;) {
        ucx_feed_drain();   /* the ranges reported since: UCX drops their regions first */
        t_fresh = NULL;
        t_in_get++;
        st = ucx_real.get_raw(rcache, address, length, a3, a4, a5, a6);
        t_in_get--;
        if (st != UCS_OK || *region_p == t_fresh)
            return st;      /* an error, or registered just now: watched since before */
        if (region_fresh(w, *region_p) == FRESH)
            return UCS_OK;
        ucx_real.put(rcache, *region_p);
    }
}

/* ---- UCP's inline hits (1.14 on) ---------------------------------------------------- */
VMT_UCX_EXPORT ucs_status_t ucs_pgtable_init(void *pgtable, void *alloc_cb, void *release_cb)
{
    struct wrap *w = t_creating;

    __typeof__(g.pgt_init) init = __atomic_load_n(&g.pgt_init, __ATOMIC_RELAXED);

    if (!init) {
        init = (__typeof__(init))dlsym(RTLD_NEXT, "ucs_pgtable_init");
        if (!init)
            return UCS_ERR_UNSUPPORTED;
        __atomic_store_n(&g.pgt_init, init, __ATOMIC_RELAXED);
    }
    if (w && !w->pgtable)
        w->pgtable = pgtable;       /* the first page table of the rcache being created */
    return init(pgtable, alloc_cb, release_cb);
}

VMT_UCX_EXPORT void *ucs_pgtable_lookup(const void *pgtable, uintptr_t address)
{
    void *(*lookup)(const void *, uintptr_t) = __atomic_load_n(&g.lookup, __ATOMIC_RELAXED);
    struct wrap *w;
    void *r;

    if (__builtin_expect(!lookup, 0)) {     /* once: UCX's memory-type cache calls it often */
        lookup = (__typeof__(lookup))dlsym(RTLD_NEXT, "ucs_pgtable_lookup");
        if (!lookup)
            return NULL;
        __atomic_store_n(&g.lookup, lookup, __ATOMIC_RELAXED);
    }
    if (!atomic_load_explicit(&g.lookups_checked, memory_order_relaxed) || t_in_get ||
        !(w = find_wrap_of_pgtable(pgtable)))
        return lookup(pgtable, address);
    /* UCP holds only its context lock here: give UCX the ranges reported since (ucx_feed.c) */
    ucx_feed_drain();
    r = lookup(pgtable, address);
    if (!r)
        return r;
    /* A registered region always has its watch (mem_reg sets it); one without is being
     * registered, or failed to: UCX's own test of the region turns it down. */
    if (!tail_of(w, r)->watch)
        return r;
    /* Stale, or an event to look at first: UCP's slow path (ucs_rcache_get) asks again. */
    switch (region_fresh(w, r)) {
    case FRESH:
        return r;
    case STALE:
        atomic_fetch_add_explicit(&ucx_counters.stale_lookups, 1, memory_order_relaxed);
        return NULL;
    default:
        return NULL;
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
