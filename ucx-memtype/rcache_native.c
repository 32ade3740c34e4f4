/* The six functions of ucs/memory/rcache.h, interposed, and UCX's host-memory registration
 * caches served by vmtrack's shared cache.
 *
 * Under a release other than 1.13 (ucx_release.h) every call goes to libucs with the
 * arguments its caller passed; an rcache that needs unmap events is watched
 * (rcache_watch.c) under VMT_UCX_WATCH, and refused when the feed says UCX must not cache
 * (VMT_UCX_UNCACHED, or SYNC with the events not arriving). Under 1.13, an rcache that only
 * asks for UCM_EVENT_VM_UNMAPPED (host memory: UCX's ib md, knem) becomes a device of
 * vmt_shared(): a hit is a vmt_get, no UCX page table, no rwlock, no LRU spinlock.
 * Everything else goes to libucs (rcache_watch.c watches it with kmod or uffd), and keeps
 * getting vmtrack's events from the feed (ucx_feed.c):
 *   - ucm_events 0 (xpmem caches a peer's segments by the peer's addresses: never vmtrack's),
 *   - UCM_EVENT_MEM_TYPE_FREE (GPU memory: no tracker sees cudaFree; UCP's own rcache asks
 *     for it too),
 *   - parameters UCX would refuse (UCX then says why), VMTRACK_UCX_NATIVE=0, module off.
 * A native rcache starts with a magic word; at that offset a real ucx_rcache_t holds a size,
 * so one load tells them apart.
 *
 * Region memory: a 32-byte header, then region_struct_size zeroed bytes (16-byte aligned,
 * stable until deregistered). The header maps the region back to its vmt_reg (one region per
 * device registration, so 1:1), counts ucs_rcache_region_hold()s and keeps the invalidation
 * completions, which run after mem_dereg.
 *
 * mem_reg gets the caller's arg through a thread-local: vmtrack calls a device's reg only
 * inside the calling thread's vmt_get (include/vmtrack.h). A range larger than the request
 * is a merge: UCX's HIDE_ERRORS flag is passed and a failure returns -EFAULT, which makes
 * vmtrack register the request alone, as UCX does. mem_reg/mem_dereg of one rcache run under
 * its (recursive) lock, as under UCX's page-table lock (md_lock.h). Only misses take it. */
#define _GNU_SOURCE
#include "config.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <ucm/api/ucm.h>

#include "md_lock.h"
#include "rcache_watch.h"
#include "ucx_feed.h"
#include "ucx_release.h"
#include "vmtrack.h"
#include "vmtrack_ucx.h"

#define NATIVE_MAGIC 0x766d7472756378aaULL   /* "vmtrucx" */
/* The header's 32 bytes and the region's first 32 share a line (the allocation is 64-byte
 * aligned): a hit reads the header, UCX's callers the region, and a region of the ib md spans
 * one line fewer than behind a 64-byte header (one cold line less per miss). */
#define HDR_SIZE 32

struct native_rcache {
    uint64_t magic;                 /* first: tells a native rcache from a real one */
    struct vmt_device *_Atomic dev;
    _Atomic unsigned gen;           /* fork generation dev was attached in */
    struct ucx_g1_params params;
    struct vmt_device_ops dops;
    struct md_lock cb_lock;         /* mem_reg / mem_dereg, and spare_hdrs */
    struct native_hdr *spare_hdrs;  /* deregistered regions' memory, for the next misses */
    unsigned nspare;
    _Atomic int destroying;
    _Atomic size_t leaked;          /* regions held at destroy: deregistered, not freed */
    struct native_rcache *next;     /* in n.all, under n.lock */
    char name[64];
};

struct completion {
    ucx_comp_cb_t cb;
    void *arg;
    struct completion *next;
};

struct native_hdr {
    struct vmt_reg *_Atomic reg;
    union {
        struct native_rcache *nr;
        struct native_hdr *next_spare;  /* in nr->spare_hdrs */
    };
    /* What a put must know, in one word so that the common put reads it with one load:
     * the ucs_rcache_region_hold()s not yet put (PUT_HOLDS), PUT_DEAD (deregistered by the
     * rcache's destroy while held) and, above them, the fork generation of the region. */
    _Atomic uint64_t put_state;
    struct completion *_Atomic comps;
};
_Static_assert(sizeof(struct native_hdr) <= HDR_SIZE, "header fits");
_Static_assert(HDR_SIZE % 16 == 0, "regions stay 16-byte aligned");
#define PUT_HOLDS 0x7fffffffu
#define PUT_DEAD 0x80000000u

static inline uint64_t put_state_of(unsigned gen)
{
    return (uint64_t)gen << 32;     /* no extra holds, not dead */
}

static inline unsigned gen_of(struct native_hdr *h)
{
    return (unsigned)(atomic_load(&h->put_state) >> 32);
}

static inline int is_dead(struct native_hdr *h)
{
    return !!(atomic_load(&h->put_state) & PUT_DEAD);
}

/* the get in progress in this thread (a stack: a mem_reg may get from another rcache) */
struct native_req {
    struct native_rcache *nr;
    void *arg;
    uintptr_t addr;                 /* the request (dev_reg rounds it to pages, as vmtrack */
    size_t len;                     /* does: only a miss needs that) */
    ucs_status_t status;            /* mem_reg's own status when it failed */
    struct native_req *prev;
};
/* initial-exec: one %fs-relative load, not a __tls_get_addr call, on every get (a preloaded
 * or directly linked library has room in the static TLS block) */
static __thread struct native_req *t_req __attribute__((tls_model("initial-exec")));
static uintptr_t g_page;

static struct {
    pthread_mutex_t lock;
    int decided, enabled;
    char why[160];
    struct native_rcache *all;      /* every native rcache (PURGE_ON_FORK walks them) */
    _Atomic unsigned gen;
} n = {.lock = PTHREAD_MUTEX_INITIALIZER};

static inline struct native_rcache *native_of(ucx_rcache_t *rc)
{
    struct native_rcache *nr = (struct native_rcache *)rc;
    return nr && nr->magic == NATIVE_MAGIC ? nr : NULL;
}

static inline struct native_hdr *hdr_of(struct ucx_g1_region *r)
{
    return (struct native_hdr *)((char *)r - HDR_SIZE);
}

static inline struct ucx_g1_region *region_of(struct native_hdr *h)
{
    return (struct ucx_g1_region *)((char *)h + HDR_SIZE);
}

static void atfork_prepare(void)
{
    /* UCX_G1_FLAG_PURGE_ON_FORK: the rcache's unused regions are deregistered before fork,
     * so the child does not inherit pinned pages it cannot use. This runs before vmtrack's own
     * prepare handler (registered earlier), which takes its locks. */
    pthread_mutex_lock(&n.lock);
    for (struct native_rcache *nr = n.all; nr; nr = nr->next)
        if ((nr->params.flags & UCX_G1_FLAG_PURGE_ON_FORK) &&
            atomic_load(&nr->gen) == atomic_load(&n.gen) && atomic_load(&nr->dev))
            vmt_device_flush(atomic_load(&nr->dev));
    pthread_mutex_unlock(&n.lock);
}

static void atfork_child(void)
{
    atomic_fetch_add(&n.gen, 1);
    for (struct native_rcache *nr = n.all; nr; nr = nr->next)
        md_lock_after_fork_child(&nr->cb_lock);
}

static int native_enabled(void)
{
    pthread_mutex_lock(&n.lock);
    if (!n.decided) {
        const char *env = getenv("VMTRACK_UCX_NATIVE");
        n.decided = 1;
        if (env && !strcmp(env, "0"))
            snprintf(n.why, sizeof(n.why), "VMTRACK_UCX_NATIVE=0");
        else if (env && *env && strcmp(env, "1"))
            snprintf(n.why, sizeof(n.why), "VMTRACK_UCX_NATIVE=%s is not 1 or 0", env);
        else if (!ucx_real.put || !ucx_real.hold || !ucx_real.invalidate)
            snprintf(n.why, sizeof(n.why), "libucs's region functions not found");
        else {
            n.enabled = 1;
            pthread_atfork(atfork_prepare, NULL, atfork_child);
        }
        if (!n.enabled && env && *env && strcmp(env, "0"))
            fprintf(stderr, "vmtrack-ucx: UCX's caches stay UCX's: %s\n", n.why);
    }
    pthread_mutex_unlock(&n.lock);
    return n.enabled;
}

/* ---- the device ---------------------------------------------------------------------- */
static int status_to_errno(ucs_status_t st)
{
    switch (st) {
    case UCS_ERR_NO_MEMORY: return -ENOMEM;
    case UCS_ERR_EXCEEDS_LIMIT: return -ENOSPC;
    case UCS_ERR_INVALID_PARAM: return -EINVAL;
    case UCS_ERR_INVALID_ADDR: return -EFAULT;
    default: return -EIO;
    }
}

/* Region memory, kept for reuse up to SPARE_HDRS per rcache: a cache at its limit frees
 * one region and allocates one per miss, and posix_memalign with its alignment split was a
 * tenth of the module's miss. Under cb_lock. */
#define SPARE_HDRS 64

static struct native_hdr *hdr_take(struct native_rcache *nr)
{
    struct native_hdr *h = nr->spare_hdrs;
    if (h) {
        nr->spare_hdrs = h->next_spare;
        nr->nspare--;
    } else if (posix_memalign((void **)&h, 64, HDR_SIZE + nr->params.region_struct_size)) {
        return NULL;
    }
    memset(h, 0, HDR_SIZE + nr->params.region_struct_size);
    return h;
}

static void hdr_give(struct native_rcache *nr, struct native_hdr *h)
{
    if (nr->nspare >= SPARE_HDRS) {
        free(h);
        return;
    }
    h->next_spare = nr->spare_hdrs;
    nr->spare_hdrs = h;
    nr->nspare++;
}

static int dev_reg(void *ctx, void *addr, size_t len, unsigned access, void **handle)
{
    struct native_rcache *nr = ctx;
    struct native_req *req = t_req && t_req->nr == nr ? t_req : NULL;
    uintptr_t start = (uintptr_t)addr;
    int merged = req && (start < (req->addr & ~(g_page - 1)) ||
                         start + len > ((req->addr + req->len + g_page - 1) & ~(g_page - 1)));
    struct native_hdr *h;
    struct ucx_g1_region *r;
    ucs_status_t st;

    md_lock(&nr->cb_lock);
    h = hdr_take(nr);
    if (!h) {
        md_unlock(&nr->cb_lock);
        return -ENOMEM;
    }
    h->nr = nr;
    atomic_store_explicit(&h->put_state, put_state_of(atomic_load(&n.gen)),
                          memory_order_relaxed);
    r = region_of(h);
    r->super.start = start;
    r->super.end = start + len;
    r->prot = (access & VMT_ACCESS_READ ? PROT_READ : 0) |
              (access & VMT_ACCESS_WRITE ? PROT_WRITE : 0);
    r->refcount = 1;                /* callers only assert > 0: never a count here */
    r->status = UCS_OK;
    st = nr->params.ops->mem_reg(nr->params.context, (ucx_rcache_t *)nr, req ? req->arg : NULL,
                                 r, merged ? UCX_G1_MEM_REG_HIDE_ERRORS : 0);
    if (st != UCS_OK)
        hdr_give(nr, h);
    md_unlock(&nr->cb_lock);
    if (st != UCS_OK) {
        if (merged)
            return -EFAULT;         /* vmtrack registers the request alone */
        if (req)
            req->status = st;
        return status_to_errno(st);
    }
    r->flags = UCX_G1_REGION_REGISTERED | UCX_G1_REGION_PGTABLE;
    *handle = h;
    return 0;
}

static void run_completion_list(struct completion *c)
{
    while (c) {
        struct completion *next = c->next;
        c->cb(c->arg);
        free(c);
        c = next;
    }
}

/* Takes the completions out: an atomic exchange only where there are some (invalidated
 * regions), not at every deregistration. A completion is added by a holder of the region,
 * before its put, so one added after this load belongs to a later put. */
static struct completion *take_completions(struct native_hdr *h)
{
    if (!atomic_load_explicit(&h->comps, memory_order_acquire))
        return NULL;
    return atomic_exchange(&h->comps, NULL);
}

static void run_completions(struct native_hdr *h)
{
    run_completion_list(take_completions(h));
}

static void dev_dereg(void *ctx, void *handle)
{
    struct native_rcache *nr = ctx;
    struct native_hdr *h = handle;
    struct ucx_g1_region *r = region_of(h);

    r->flags = 0;
    md_lock(&nr->cb_lock);
    nr->params.ops->mem_dereg(nr->params.context, (ucx_rcache_t *)nr, r);
    if (!atomic_load(&nr->destroying)) {
        /* the last put was made: nobody looks at the region again but its completions,
         * which run after mem_dereg, as UCP expects */
        struct completion *c = take_completions(h);
        hdr_give(nr, h);
        md_unlock(&nr->cb_lock);
        run_completion_list(c);
        return;
    }
    md_unlock(&nr->cb_lock);
    run_completions(h);
    /* destroy while the caller still holds it: keep the memory (the caller may still read
     * it), as UCX does; its put becomes a no-op */
    atomic_fetch_or(&h->put_state, PUT_DEAD);
    atomic_fetch_add(&nr->leaked, 1);
}

/* The device of this process (after fork() the child attaches its own, once, lazily). */
static __attribute__((noinline)) struct vmt_device *attach_device(struct native_rcache *nr,
                                                                   unsigned gen)
{
    pthread_mutex_lock(&n.lock);
    if (atomic_load(&nr->gen) != gen) {
        struct vmt_device *d = NULL;
        if (vmt_device_attach(vmt_shared(), &nr->dops, nr, &d) < 0)
            d = NULL;
        atomic_store(&nr->dev, d);
        atomic_store_explicit(&nr->gen, gen, memory_order_release);
    }
    pthread_mutex_unlock(&n.lock);
    return atomic_load(&nr->dev);
}

static inline struct vmt_device *device(struct native_rcache *nr)
{
    unsigned gen = atomic_load_explicit(&n.gen, memory_order_relaxed);
    if (__builtin_expect(atomic_load_explicit(&nr->gen, memory_order_acquire) == gen, 1))
        return atomic_load_explicit(&nr->dev, memory_order_relaxed);
    return attach_device(nr, gen);
}

/* ---- the six functions --------------------------------------------------------------- */
/* What UCX's ucs_rcache_create accepts (rcache.c checks the same): anything else goes to
 * libucs as given, so that UCX refuses it with its own message. */
static int g1_params_valid(const struct ucx_g1_params *p)
{
    return p && p->ops && p->ops->mem_reg && p->ops->mem_dereg &&
           p->region_struct_size >= sizeof(struct ucx_g1_region) &&
           p->alignment >= UCX_G1_MIN_ALIGNMENT && !(p->alignment & (p->alignment - 1)) &&
           p->alignment <= p->max_alignment;
}

/* 1 and *rcache_p set: served by vmtrack; 0: not for vmtrack; < 0: an errno. */
static int native_create(const struct ucx_g1_params *params, const char *name,
                         ucx_rcache_t **rcache_p)
{
    struct native_rcache *nr;

    if (params->ucm_events != UCM_EVENT_VM_UNMAPPED || !native_enabled())
        return 0;
    if (posix_memalign((void **)&nr, 64, sizeof(*nr)))
        return -ENOMEM;
    memset(nr, 0, sizeof(*nr));
    md_lock_init(&nr->cb_lock);
    nr->magic = NATIVE_MAGIC;
    nr->params = *params;
    snprintf(nr->name, sizeof(nr->name), "ucx:%s", name ? name : "rcache");
    nr->dops.sz = sizeof(nr->dops);
    nr->dops.name = nr->name;
    nr->dops.reg = dev_reg;
    nr->dops.dereg = dev_dereg;
    nr->dops.max_regions = params->max_regions == ULONG_MAX ? 0 : params->max_regions;
    nr->dops.max_bytes = params->max_size == SIZE_MAX ? 0 : params->max_size;
    /* UCX's rcache registers a new region first and then evicts its LRU ones down to
     * max_regions/max_size: they size the cache, the MD can hold more. It merges a new region
     * only with the ones it overlaps. */
    nr->dops.flags = VMT_DEVICE_SOFT_LIMITS | VMT_DEVICE_MERGE_OVERLAPS_ONLY;
    g_page = (uintptr_t)sysconf(_SC_PAGESIZE);
    atomic_store(&nr->gen, atomic_load(&n.gen) + 1);   /* not attached yet */
    if (!device(nr)) {
        free(nr);
        return -ENODEV;
    }
    pthread_mutex_lock(&n.lock);
    nr->next = n.all;
    n.all = nr;
    pthread_mutex_unlock(&n.lock);
    atomic_fetch_add(&ucx_counters.native, 1);
    *rcache_p = (ucx_rcache_t *)nr;
    return 1;
}

static int native_destroy(ucx_rcache_t *rcache)
{
    struct native_rcache *nr = native_of(rcache);
    struct vmt_device *d;
    size_t leaked;

    if (!nr)
        return 0;
    pthread_mutex_lock(&n.lock);
    for (struct native_rcache **p = &n.all; *p; p = &(*p)->next)
        if (*p == nr) {
            *p = nr->next;
            break;
        }
    pthread_mutex_unlock(&n.lock);
    d = atomic_load(&nr->gen) == atomic_load(&n.gen) ? atomic_load(&nr->dev) : NULL;
    if (d) {
        /* what is not in use goes first, so that what the detach deregisters is only what
         * callers still hold */
        vmt_device_flush(d);
        atomic_store(&nr->destroying, 1);
        vmt_device_detach(d);
    }
    leaked = atomic_load(&nr->leaked);
    if (leaked)
        fprintf(stderr, "vmtrack-ucx: rcache %s destroyed with %zu regions in use\n",
                nr->name, leaked);
    while (nr->spare_hdrs) {
        struct native_hdr *h = nr->spare_hdrs;
        nr->spare_hdrs = h->next_spare;
        free(h);
    }
    nr->magic = 0;
    free(nr);
    atomic_fetch_sub(&ucx_counters.native, 1);
    return 1;
}

/* vmtrack's rights for UCX's prot (none: read, as a registration needs some) */
static inline unsigned access_of(int prot)
{
    unsigned access = (prot & PROT_WRITE ? VMT_ACCESS_WRITE : 0) |
                      (prot & PROT_READ ? VMT_ACCESS_READ : 0);
    return access ? access : VMT_ACCESS_READ;
}

/* The region of a registration vmtrack gave; the first get of it (a miss, or another
 * thread's hit before the miss returned) notes the registration for the puts. */
static inline struct ucx_g1_region *region_got(struct native_hdr *h, struct vmt_reg *v)
{
    if (__builtin_expect(!atomic_load_explicit(&h->reg, memory_order_relaxed), 0))
        atomic_store_explicit(&h->reg, v, memory_order_relaxed);
    return region_of(h);
}

/* ucs_rcache_get's arguments for a native rcache, in memory across the memo lookup: kept in
 * registers instead, they cost every hit six saves and restores (0.3-0.4 ns of 11), and only
 * a miss reads them. 1.13 passes six arguments: no seventh to keep. */
struct get_call {
    struct native_rcache *nr;
    void *address;
    size_t length;
    uintptr_t prot, arg, region_p;
};

/* ucs_rcache_get of an rcache the module does not serve: a watched one is checked
 * (rcache_watch.c), the others go to libucs with the caller's arguments as they came,
 * whichever of the two lists its release passes. Out of line, so that the hit path keeps no
 * frame for it. */
static __attribute__((noinline)) ucs_status_t get_forward(ucx_rcache_t *rcache, void *address,
                                                          size_t length, uintptr_t a3,
                                                          uintptr_t a4, uintptr_t a5,
                                                          uintptr_t a6)
{
    return ucx_watch_get(rcache, address, length, a3, a4, a5, a6);
}

/* Everything but a memo hit: the request in t_req for dev_reg, then the index and a
 * registration (vmt_get_handle_walk: vmt_get_memo has looked at the memo already). */
static __attribute__((noinline)) ucs_status_t get_registering(const struct get_call *c)
{
    struct native_rcache *nr = c->nr;
    struct native_req req;
    struct native_hdr *h;
    struct vmt_device *d;
    struct vmt_reg *v;
    int ret;

    d = device(nr);
    if (!d)
        return UCS_ERR_IO_ERROR;
    req.nr = nr;
    req.arg = (void *)c->arg;
    req.addr = (uintptr_t)c->address;
    req.len = c->length;
    req.status = UCS_OK;
    req.prev = t_req;
    t_req = &req;
    ret = vmt_get_handle_walk(d, c->address, c->length, access_of((int)c->prot), &v,
                              (void **)&h);
    t_req = req.prev;
    if (ret < 0)
        return req.status != UCS_OK ? req.status : vmt_ucx_errno_to_status(ret);
    *(struct ucx_g1_region **)c->region_p = region_got(h, v);
    return UCS_OK;
}

/* The hit path: the magic, the device, vmtrack's memo; no request is set up for a hit.
 *
 * Callers pass what their release declares: 1.13-1.16 (rcache, address, length, int prot,
 * arg, region_p), 1.17 on (rcache, address, length, size_t alignment, int prot, arg,
 * region_p). The export takes the longer list, the last four as integers, and reads them as
 * the running release passed them: on LP64 ABIs a six-argument caller's arguments are the
 * first six here, and the seventh (a stack slot of the caller's frame) is only read for a
 * release that passes it. Only a native rcache (1.13) is served here; none exists on another
 * release, where every call is forwarded (rcache_watch.c) by a tail call: the arguments go
 * on as they came, the seventh in its stack slot, and a hit stores none it does not need. */
VMT_UCX_EXPORT ucs_status_t ucs_rcache_get(ucx_rcache_t *rcache, void *address, size_t length,
                                           uintptr_t a3, uintptr_t a4, uintptr_t a5,
                                           uintptr_t a6)
{
    struct native_rcache *nr = native_of(rcache);
    struct native_hdr *h;
    struct vmt_device *d;
    struct vmt_reg *v;

    if (__builtin_expect(!nr, 0))
        return get_forward(rcache, address, length, a3, a4, a5, a6);
    struct get_call c = {nr, address, length, a3, a4, a5};
    __asm__ volatile("" : : "m"(c));    /* stored here: see struct get_call */
    /* No fork generation check (device() is the miss's): a device attached before fork()
     * answers no memo lookup in the child, where vmtrack marks it forked away. */
    if (__builtin_expect((d = atomic_load_explicit(&nr->dev, memory_order_acquire)) != NULL, 1) &&
        vmt_get_memo(d, address, length, access_of((int)a3), &v, (void **)&h) == 0) {
        *(struct ucx_g1_region **)a5 = region_got(h, v);
        return UCS_OK;
    }
    return get_registering(&c);
}

VMT_UCX_EXPORT void ucs_rcache_region_hold(ucx_rcache_t *rcache, struct ucx_g1_region *region)
{
    if (!native_of(rcache)) {
        ucx_real_resolve();
        ucx_real.hold(rcache, region);
        return;
    }
    atomic_fetch_add_explicit(&hdr_of(region)->put_state, 1, memory_order_relaxed);
}

/* Out of line: a call in ucs_rcache_region_put would give its common path a frame. */
static __attribute__((noinline)) void put_forward(ucx_rcache_t *rcache,
                                                  struct ucx_g1_region *region)
{
    ucx_real_resolve();
    ucx_real.put(rcache, region);
}

/* A put that is not the common one: an extra hold to give back, or a region that is no
 * longer vmtrack's (made in the parent before fork(), or deregistered by a destroy). */
static __attribute__((noinline)) void put_uncommon(struct native_hdr *h, uint64_t state)
{
    for (;;) {
        if ((unsigned)(state >> 32) != atomic_load(&n.gen) || (state & PUT_DEAD))
            return;
        if (!(state & PUT_HOLDS)) {
            vmt_put(atomic_load_explicit(&h->reg, memory_order_relaxed));
            return;
        }
        if (atomic_compare_exchange_weak(&h->put_state, &state, state - 1))
            return;
    }
}

VMT_UCX_EXPORT void ucs_rcache_region_put(ucx_rcache_t *rcache, struct ucx_g1_region *region)
{
    struct native_hdr *h;
    uint64_t state;

    if (!native_of(rcache)) {
        put_forward(rcache, region);
        return;
    }
    h = hdr_of(region);
    state = atomic_load_explicit(&h->put_state, memory_order_relaxed);
    if (__builtin_expect(state != put_state_of(atomic_load_explicit(&n.gen,
                                                                    memory_order_relaxed)), 0)) {
        put_uncommon(h, state);
        return;
    }
    vmt_put(atomic_load_explicit(&h->reg, memory_order_relaxed));
}

VMT_UCX_EXPORT void ucs_rcache_region_invalidate(ucx_rcache_t *rcache, struct ucx_g1_region *region,
                                                 ucx_comp_cb_t cb, void *arg)
{
    struct native_hdr *h;
    struct completion *c;

    if (!rcache) {
        /* UCP 1.18-1.21 asks this of a memory handle made without a cache when a
         * rendezvous is aborted (UCX's #11467): no cache holds the region, so there is
         * nothing to drop; the completion runs now, as UCX does from 1.22 on */
        cb(arg);
        return;
    }
    if (!native_of(rcache)) {
        ucx_real_resolve();
        ucx_real.invalidate(rcache, region, cb, arg);
        return;
    }
    h = hdr_of(region);
    c = malloc(sizeof(*c));
    if (!c) {
        fprintf(stderr, "vmtrack-ucx: out of memory for an invalidation completion\n");
        abort();
    }
    c->cb = cb;
    c->arg = arg;
    c->next = atomic_load(&h->comps);
    while (!atomic_compare_exchange_weak(&h->comps, &c->next, c))
        ;
    /* out of the cache now, other devices' registrations of the range untouched;
     * deregistered (and the completions run) at the last put */
    if (is_dead(h))
        run_completions(h);         /* deregistered already, by the rcache's destroy */
    else if (gen_of(h) == atomic_load(&n.gen))
        vmt_reg_invalidate(atomic_load(&h->reg));
}


/* ucs_rcache_create under a release whose rcaches the module does not serve. */
static ucs_status_t create_unserved(const void *params, const char *name, void *stats_parent,
                                    ucx_rcache_t **rcache_p)
{
    static _Atomic int said;
    int events = ucx_release_params_events(params);
    enum vmt_ucx_mode mode = ucx_feed_mode();

    if (events > 0 && (events & UCM_EVENT_VM_UNMAPPED)) {
        if (mode == VMT_UCX_WATCH) {
            ucs_status_t st = ucx_watch_create(params, name, stats_parent, rcache_p);
            if (st == UCS_OK)
                atomic_fetch_add(&ucx_counters.forwarded, 1);
            return st;
        }
        if (mode == VMT_UCX_UNCACHED) {
            atomic_fetch_add(&ucx_counters.refused, 1);
            if (!atomic_exchange(&said, 1))
                ucx_log(1, "UCX %s with vmtrack's %s tracker: refusing UCX's registration "
                        "cache \"%s\" (UCP's hits could not be checked); UCX registers per "
                        "operation", ucx_release()->name, ucx_feed_tracker(), name ? name : "?");
            return UCS_ERR_UNSUPPORTED;
        }
        if (mode == VMT_UCX_SYNC && !ucx_feed_reaches_ucx(name)) {
            atomic_fetch_add(&ucx_counters.refused, 1);
            return UCS_ERR_UNSUPPORTED;
        }
    }
    atomic_fetch_add(&ucx_counters.forwarded, 1);
    return ucx_real.create(params, name, stats_parent, rcache_p);
}

/* params is a ucs_rcache_params_t of the running release: read as 1.13's only under 1.13. */
VMT_UCX_EXPORT ucs_status_t ucs_rcache_create(const void *params, const char *name,
                                              void *stats_parent, ucx_rcache_t **rcache_p)
{
    const struct ucx_g1_params *p = params;
    enum vmt_ucx_mode mode;
    int native;

    vmt_ucx_init();
    ucx_real_resolve();
    if (!ucx_real.create)
        return UCS_ERR_UNSUPPORTED;
    if (ucx_release()->support != UCX_SERVE)
        return create_unserved(params, name, stats_parent, rcache_p);
    mode = ucx_feed_mode();
    if (mode == VMT_UCX_OFF || !g1_params_valid(p) || !(p->ucm_events & UCM_EVENT_VM_UNMAPPED)) {
        atomic_fetch_add(&ucx_counters.forwarded, 1);
        return ucx_real.create(params, name, stats_parent, rcache_p);
    }
    /* Without unmap events, refuse: UCX then registers without a cache (slow, never stale). */
    if (mode == VMT_UCX_SYNC && !ucx_feed_reaches_ucx(name))
        return UCS_ERR_UNSUPPORTED;
    native = native_create(p, name, rcache_p);
    if (native > 0)
        return UCS_OK;
    if (native < 0)
        return UCS_ERR_NO_MEMORY;
    atomic_fetch_add(&ucx_counters.forwarded, 1);
    return ucx_watch_create(p, name, stats_parent, rcache_p);
}

VMT_UCX_EXPORT void ucs_rcache_destroy(ucx_rcache_t *rcache)
{
    if (native_destroy(rcache))
        return;
    ucx_real_resolve();
    ucx_watch_destroy(rcache);
}
