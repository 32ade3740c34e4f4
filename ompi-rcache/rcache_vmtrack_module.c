/* Open MPI rcache component "vmtrack": the module (register, deregister, find,
 * invalidate_range, evict, finalize) on libvmtrack's shared cache. See rcache_vmtrack.h. */
#include "rcache_vmtrack.h"
#include "ompi_compat.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include "opal/class/opal_object.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/runtime/opal_params.h"
#include "opal/sys/atomic.h"
#include "opal/util/output.h"

#define C mca_rcache_vmtrack_component

/* What the BTL's register_mem returned, for the vmt_get that called it in this thread: the
 * Open MPI error code is handed back unchanged instead of a translated errno. */
/* initial-exec: in a dlopen()ed component the default TLS model may call malloc on a thread's
 * first access, which must not happen inside a memory hook; glibc keeps static TLS room for
 * a few bytes of initial-exec TLS in dlopen()ed objects. */
#define VMT_TLS __thread __attribute__((tls_model("initial-exec")))
static VMT_TLS int last_btl_rc;
/* The page range this thread's vmt_get asked for: vmtrack may register a larger one (merged
 * with cached neighbours), and a neighbour being unmapped meanwhile makes the BTL fail on
 * memory the caller never asked for. */
static VMT_TLS uintptr_t asked_lo, asked_hi;
static uintptr_t page_size = 4096;   /* sysconf's, from the first module creation */

/* Set while this thread forwards an Open MPI memory-hook event to vmtrack: vmt_invalidate
 * deregisters unused registrations at once, but the hook may run inside free() or munmap()
 * with malloc's locks held, where the BTL's deregister_mem (and free) must not run. */
static VMT_TLS int in_opal_hook;

static inline void stat_add(uint64_t *counter)
{
    __atomic_fetch_add(counter, 1, __ATOMIC_RELAXED);
}

__attribute__((visibility("hidden"))) unsigned vmt_ompi_access_to_vmt(int32_t a)
{
    unsigned v = VMT_ACCESS_READ;   /* local read is implied by every registration */
    if (a & MCA_RCACHE_ACCESS_LOCAL_WRITE)
        v |= VMT_ACCESS_WRITE;
    if (a & MCA_RCACHE_ACCESS_REMOTE_READ)
        v |= VMT_ACCESS_REMOTE_READ;
    if (a & MCA_RCACHE_ACCESS_REMOTE_WRITE)
        v |= VMT_ACCESS_REMOTE_WRITE;
    if (a & MCA_RCACHE_ACCESS_REMOTE_ATOMIC)
        v |= VMT_ACCESS_REMOTE_ATOMIC;
    return v;
}

__attribute__((visibility("hidden"))) int32_t vmt_ompi_access_to_mca(unsigned v)
{
    int32_t a = 0;
    if (v & VMT_ACCESS_WRITE)
        a |= MCA_RCACHE_ACCESS_LOCAL_WRITE;
    if (v & VMT_ACCESS_REMOTE_READ)
        a |= MCA_RCACHE_ACCESS_REMOTE_READ;
    if (v & VMT_ACCESS_REMOTE_WRITE)
        a |= MCA_RCACHE_ACCESS_REMOTE_WRITE;
    if (v & VMT_ACCESS_REMOTE_ATOMIC)
        a |= MCA_RCACHE_ACCESS_REMOTE_ATOMIC;
    return a;
}

static int errno_to_opal(int err)
{
    switch (err) {
    case -ENOMEM:
    case -ENOSPC:
        return OPAL_ERR_OUT_OF_RESOURCE;
    case -EINVAL:
    case -EFAULT:
        return OPAL_ERR_BAD_PARAM;
    case -ENOTSUP:
        return OPAL_ERR_NOT_SUPPORTED;
    default:
        return OPAL_ERROR;
    }
}

/* ---- registrations as BTLs see them ---------------------------------------------------- */

static mca_rcache_base_registration_t *reg_alloc(mca_rcache_vmtrack_module_t *m, uint32_t kind)
{
    void *mem = NULL;
    size_t total = sizeof(struct vmt_ompi_hdr) + m->res.sizeof_reg;
    if (0 != posix_memalign(&mem, 64, total))
        return NULL;
    memset(mem, 0, total);
    struct vmt_ompi_hdr *hdr = (struct vmt_ompi_hdr *) mem;
    hdr->magic = VMT_OMPI_HDR_MAGIC;
    hdr->kind = kind;
    hdr->module = m;
    mca_rcache_base_registration_t *reg = (mca_rcache_base_registration_t *) (hdr + 1);
    OBJ_CONSTRUCT(reg, mca_rcache_base_registration_t);
    reg->rcache = &m->super;
    return reg;
}

static void reg_free(mca_rcache_base_registration_t *reg)
{
    struct vmt_ompi_hdr *hdr = vmt_ompi_hdr_of(reg);
    OBJ_DESTRUCT(reg);
    hdr->magic = 0;
    free(hdr);
}

/* ---- the vmtrack device: the BTL's callbacks ---------------------------------------------- */

static int dev_reg(void *ctx, void *addr, size_t len, unsigned access, void **handle)
{
    mca_rcache_vmtrack_module_t *m = (mca_rcache_vmtrack_module_t *) ctx;
    mca_rcache_base_registration_t *reg = reg_alloc(m, VMT_OMPI_KIND_CACHED);
    if (NULL == reg)
        return -ENOMEM;
    reg->base = (unsigned char *) addr;
    reg->bound = (unsigned char *) addr + len - 1;
    reg->alloc_base = (unsigned char *) addr;
    reg->flags = 0;
    reg->access_flags = vmt_ompi_access_to_mca(access);
    reg->ref_count = 1;
    int rc = m->res.register_mem(m->res.reg_data, addr, len, reg);
    if (OPAL_SUCCESS != rc) {
        reg_free(reg);
        last_btl_rc = rc;
        /* OUT_OF_RESOURCE: the cache evicts unused registrations and retries once. */
        if (OPAL_ERR_OUT_OF_RESOURCE == rc)
            return -ENOMEM;
        /* -EFAULT on a merged range: vmtrack retries with just the request. */
        if ((uintptr_t) addr < asked_lo || (uintptr_t) addr + len > asked_hi)
            return -EFAULT;
        return -EIO;
    }
    stat_add(&m->n_btl_reg);
    *handle = reg;
    vmt_ompi_takeover_guard();   /* a miss already pays for a registration */
    return 0;
}

static void btl_dereg(mca_rcache_vmtrack_module_t *m, mca_rcache_base_registration_t *reg)
{
    int rc = m->res.deregister_mem(m->res.reg_data, reg);
    if (OPAL_SUCCESS != rc) {
        stat_add(&m->n_errors);
        opal_output(0, "rcache vmtrack: %s: deregister_mem of [%p, %p] failed (%d)",
                    m->res.cache_name, (void *) reg->base, (void *) reg->bound, rc);
    }
    stat_add(&m->n_btl_dereg);
    reg_free(reg);
}

/* Run the deregistrations deferred out of a memory hook (lock-free list, any thread). */
static void gc_drain(mca_rcache_vmtrack_module_t *m)
{
    if (NULL == __atomic_load_n(&m->gc_head, __ATOMIC_RELAXED))
        return;
    struct vmt_ompi_hdr *h = __atomic_exchange_n(&m->gc_head, NULL, __ATOMIC_ACQUIRE);
    while (h) {
        struct vmt_ompi_hdr *next = h->gc_next;
        btl_dereg(m, (mca_rcache_base_registration_t *) (h + 1));
        h = next;
    }
}

static void dev_dereg(void *ctx, void *handle)
{
    mca_rcache_vmtrack_module_t *m = (mca_rcache_vmtrack_module_t *) ctx;
    mca_rcache_base_registration_t *reg = (mca_rcache_base_registration_t *) handle;
    if (in_opal_hook) {
        struct vmt_ompi_hdr *h = vmt_ompi_hdr_of(reg);
        struct vmt_ompi_hdr *old = __atomic_load_n(&m->gc_head, __ATOMIC_RELAXED);
        do {
            h->gc_next = old;
        } while (!__atomic_compare_exchange_n(&m->gc_head, &old, h, true, __ATOMIC_RELEASE,
                                              __ATOMIC_RELAXED));
        return;
    }
    btl_dereg(m, reg);
}

/* ---- module functions ------------------------------------------------------------------- */

/* Flags that change how the BTL registers (or that the caller reserves for the BTL's
 * register_mem) cannot share a registration made without them: such requests are served
 * uncached. PERSIST (stays registered while held) is what every cached hold already is. */
#define VMT_OMPI_CACHEABLE_FLAGS ((uint32_t) MCA_RCACHE_FLAGS_PERSIST)

static int register_uncached(mca_rcache_vmtrack_module_t *m, void *addr, size_t size,
                             uint32_t flags, int32_t access_flags,
                             mca_rcache_base_registration_t **out)
{
    size_t page = (size_t) sysconf(_SC_PAGESIZE);
    uintptr_t a0 = (uintptr_t) addr & ~(page - 1);
    uintptr_t a1 = ((uintptr_t) addr + size + page - 1) & ~(page - 1);
    mca_rcache_base_registration_t *reg = reg_alloc(m, VMT_OMPI_KIND_UNCACHED);
    if (NULL == reg)
        return OPAL_ERR_OUT_OF_RESOURCE;
    reg->base = (unsigned char *) a0;
    reg->bound = (unsigned char *) a1 - 1;
    reg->alloc_base = (unsigned char *) a0;
    reg->flags = flags;
    reg->access_flags = access_flags;
    reg->ref_count = 1;
    int rc = m->res.register_mem(m->res.reg_data, (void *) a0, a1 - a0, reg);
    if (OPAL_SUCCESS != rc) {
        reg_free(reg);
        return rc;
    }
    stat_add(&m->n_btl_reg);
    stat_add(&m->n_uncached);
    *out = reg;
    return OPAL_SUCCESS;
}

static int vmt_ompi_register(mca_rcache_base_module_t *rcache, void *addr, size_t size,
                             uint32_t flags, int32_t access_flags,
                             mca_rcache_base_registration_t **reg)
{
    mca_rcache_vmtrack_module_t *m = (mca_rcache_vmtrack_module_t *) rcache;
    *reg = NULL;
    if (NULL == addr || 0 == size || (flags & MCA_RCACHE_FLAGS_INVALID) ||
        (access_flags & ~(int32_t) MCA_RCACHE_ACCESS_ANY)) {
        stat_add(&m->n_errors);
        opal_output_verbose(1, C.output, "rcache vmtrack: register(%p, %zu, flags 0x%x, "
                            "access 0x%x) refused: bad argument", addr, size, flags,
                            (unsigned) access_flags);
        return OPAL_ERR_BAD_PARAM;
    }
    gc_drain(m);
    if (VMT_OMPI_MODE_UNCACHED == m->mode || (flags & ~VMT_OMPI_CACHEABLE_FLAGS))
        return register_uncached(m, addr, size, flags, access_flags, reg);

    struct vmt_reg *vr = NULL;
    last_btl_rc = OPAL_SUCCESS;
    uintptr_t page = page_size;
    asked_lo = (uintptr_t) addr & ~(page - 1);
    asked_hi = ((uintptr_t) addr + size + page - 1) & ~(page - 1);
    int rc = vmt_get(m->dev, addr, size, vmt_ompi_access_to_vmt(access_flags), &vr);
    if (rc < 0) {
        stat_add(&m->n_errors);
        int orc = (OPAL_SUCCESS != last_btl_rc) ? last_btl_rc : errno_to_opal(rc);
        opal_output_verbose(10, C.output, "rcache vmtrack: %s: register(%p, %zu) failed: %s",
                            m->res.cache_name, addr, size, vmt_strerror(rc));
        return orc;
    }
    mca_rcache_base_registration_t *r = (mca_rcache_base_registration_t *) vmt_reg_handle(vr);
    /* The vmtrack registration goes in the registration's own rcache_context (the line the BTL
     * reads next anyway; our header is another line). One struct vmt_reg per device handle:
     * every hold returns the same pointer, so storing it (once, or again with the same value)
     * is race-free in effect. */
    if (__atomic_load_n(&r->rcache_context, __ATOMIC_RELAXED) != (void *) vr)
        __atomic_store_n(&r->rcache_context, (void *) vr, __ATOMIC_RELAXED);
    /* No write to the registration here: holds are counted by vmtrack in each thread's own
     * record, and a shared ref_count would be the cache line every thread's hit writes.
     * reg->ref_count of a cached registration stays 1 ("held by the cache"); no 4.1 BTL
     * reads it. */
    *reg = r;
    return OPAL_SUCCESS;
}

static int vmt_ompi_deregister(mca_rcache_base_module_t *rcache,
                               mca_rcache_base_registration_t *reg)
{
    mca_rcache_vmtrack_module_t *m = (mca_rcache_vmtrack_module_t *) rcache;
    if (NULL == reg)
        return OPAL_ERR_BAD_PARAM;
    void *vr = __atomic_load_n(&reg->rcache_context, __ATOMIC_RELAXED);
    if (OPAL_LIKELY(reg->rcache == &m->super && NULL != vr)) {
        /* cached: the registration may be deregistered (and reg freed) inside vmt_put if
         * vmtrack dropped it from the cache meanwhile: nothing may touch reg afterwards. */
        vmt_put((struct vmt_reg *) vr);
        gc_drain(m);
        return OPAL_SUCCESS;
    }
    struct vmt_ompi_hdr *hdr = vmt_ompi_hdr_of(reg);
    if (reg->rcache != &m->super || VMT_OMPI_HDR_MAGIC != hdr->magic || hdr->module != m ||
        VMT_OMPI_KIND_UNCACHED != hdr->kind || reg->ref_count <= 0) {
        stat_add(&m->n_errors);
        opal_output(0, "rcache vmtrack: deregister of %p: not a live registration of this "
                    "rcache module (another module's, or already deregistered)", (void *) reg);
        return OPAL_ERR_BAD_PARAM;
    }
    /* uncached: counted in reg->ref_count, deregistered at the last deregister */
    stat_add(&m->n_deregister);
    if (0 == opal_atomic_add_fetch_32(&reg->ref_count, -1)) {
        int rc = m->res.deregister_mem(m->res.reg_data, reg);
        stat_add(&m->n_btl_dereg);
        reg_free(reg);
        return rc;
    }
    return OPAL_SUCCESS;
}

/* No 4.1 caller uses rcache_find, and libvmtrack has no lookup that leaves a miss
 * unregistered: report "not found", which is never wrong (the caller registers). */
static int vmt_ompi_find(mca_rcache_base_module_t *rcache, void *addr, size_t size,
                         mca_rcache_base_registration_t **reg)
{
    (void) rcache;
    (void) addr;
    (void) size;
    *reg = NULL;
    return OPAL_ERR_NOT_FOUND;
}

/* Called by Open MPI's memory hooks (mca_rcache_base_mem_cb) for every module, for every
 * free/munmap the patcher sees, possibly from inside free(): no allocation, no error return
 * (an error there makes Open MPI _exit the process). vmtrack keeps held registrations
 * alive until their last put, so a range still in use is not an error. */
static int vmt_ompi_invalidate_range(mca_rcache_base_module_t *rcache, void *base, size_t size)
{
    mca_rcache_vmtrack_module_t *m = (mca_rcache_vmtrack_module_t *) rcache;
    stat_add(&m->n_events);
    if (VMT_OMPI_MODE_OPAL == m->mode && C.leader == m && NULL != C.cache) {
        stat_add(&m->n_forwarded);
        in_opal_hook++;
        (void) vmt_invalidate(C.cache, base, size);
        in_opal_hook--;
    }
    /* MODE_TRACKER: vmtrack's own tracker reports this change (at the right moment: kmod
     * before the pages go); forwarding it too would count it twice. */
    return OPAL_SUCCESS;
}

/* Drop unused registrations of the shared cache (vmtrack evicts by itself under its limits;
 * this is for a caller that ran out of a device resource). */
static bool vmt_ompi_evict(mca_rcache_base_module_t *rcache)
{
    (void) rcache;
    VMT_OPTS(vmt_stats, before);
    VMT_OPTS(vmt_stats, after);
    if (NULL == C.cache || 0 != vmt_stats_get(C.cache, &before))
        return false;
    (void) vmt_flush(C.cache);
    if (0 != vmt_stats_get(C.cache, &after))
        return false;
    return after.deregistrations > before.deregistrations;
}

static void pick_leader_locked(void)
{
    mca_rcache_vmtrack_module_t *l = NULL;
    for (mca_rcache_vmtrack_module_t *it = C.modules; it; it = it->next)
        if (VMT_OMPI_MODE_OPAL == it->mode)
            l = it;   /* the oldest: modules are pushed at the head */
    C.leader = l;
}

static const char *mode_name(enum vmt_ompi_mode mode)
{
    switch (mode) {
    case VMT_OMPI_MODE_TRACKER: return "cached, vmtrack tracker";
    case VMT_OMPI_MODE_OPAL: return "cached, Open MPI memory hooks";
    default: return "uncached";
    }
}

static void vmt_ompi_finalize(mca_rcache_base_module_t *rcache)
{
    mca_rcache_vmtrack_module_t *m = (mca_rcache_vmtrack_module_t *) rcache;
    if (C.print_stats) {
        VMT_OPTS(vmt_stats, s);
        if (C.cache)
            (void) vmt_stats_get(C.cache, &s);
        opal_output(0, "rcache vmtrack: %s (%s, tracker %s): uncached register %llu "
                    "deregister %llu, btl register_mem %llu deregister_mem %llu, events %llu "
                    "(forwarded %llu), errors %llu; shared cache: hits %llu misses %llu "
                    "invalidations %llu evictions %llu entries %llu",
                    m->res.cache_name, mode_name(m->mode),
                    C.tracker_in_use ? C.tracker_in_use : "-",
                    (unsigned long long) m->n_uncached,
                    (unsigned long long) m->n_deregister, (unsigned long long) m->n_btl_reg,
                    (unsigned long long) m->n_btl_dereg, (unsigned long long) m->n_events,
                    (unsigned long long) m->n_forwarded, (unsigned long long) m->n_errors,
                    (unsigned long long) s.hits, (unsigned long long) s.misses,
                    (unsigned long long) s.invalidations, (unsigned long long) s.evictions,
                    (unsigned long long) s.entries);
    }
    pthread_mutex_lock(&C.lock);
    for (mca_rcache_vmtrack_module_t **pp = &C.modules; *pp; pp = &(*pp)->next) {
        if (*pp == m) {
            *pp = m->next;
            break;
        }
    }
    pick_leader_locked();
    pthread_mutex_unlock(&C.lock);
    /* Deregister what this module has cached and nobody holds. libvmtrack's flush acts on the
     * whole shared cache (other users of it lose unused registrations, not correctness);
     * detaching instead would also deregister registrations a BTL still holds. */
    gc_drain(m);
    if (C.cache)
        (void) vmt_flush(C.cache);
    gc_drain(m);
    uint64_t live = __atomic_load_n(&m->n_btl_reg, __ATOMIC_ACQUIRE) -
                    __atomic_load_n(&m->n_btl_dereg, __ATOMIC_ACQUIRE);
    if (0 != live) {
        /* The BTL still holds registrations: they are deregistered at their last
         * rcache_deregister, through this module and its device, so both stay. */
        opal_output_verbose(1, C.output, "rcache vmtrack: %s finalized with %llu registrations "
                            "still held by the BTL; they are deregistered when released",
                            m->res.cache_name, (unsigned long long) live);
        return;
    }
    if (m->dev)
        vmt_device_detach(m->dev);
    gc_drain(m);
    vmt_ompi_module_base_fini(&m->super);
    free(m->res.cache_name);
    free(m);
}

mca_rcache_base_module_t *vmt_ompi_module_create(mca_rcache_base_resources_t *res)
{
    if (NULL == res || NULL == res->register_mem || NULL == res->deregister_mem ||
        res->sizeof_reg < sizeof(mca_rcache_base_registration_t)) {
        opal_output(0, "rcache vmtrack: module creation refused: resources need register_mem, "
                    "deregister_mem and sizeof_reg >= %zu",
                    sizeof(mca_rcache_base_registration_t));
        return NULL;
    }
    page_size = (uintptr_t) sysconf(_SC_PAGESIZE);
    mca_rcache_vmtrack_module_t *m = calloc(1, sizeof(*m));
    if (NULL == m)
        return NULL;
    vmt_ompi_module_base_init(&m->super);
    m->res = *res;
    m->res.cache_name = strdup(res->cache_name ? res->cache_name : "vmtrack");
    m->super.rcache_component = &C.super;
    m->super.rcache_register = vmt_ompi_register;
    m->super.rcache_deregister = vmt_ompi_deregister;
    m->super.rcache_find = vmt_ompi_find;
    m->super.rcache_invalidate_range = vmt_ompi_invalidate_range;
    m->super.rcache_finalize = vmt_ompi_finalize;
    m->super.rcache_evict = vmt_ompi_evict;

    char why[256] = "";
    pthread_mutex_lock(&C.lock);
    int rc = vmt_ompi_shared_cache(&m->mode, why, sizeof(why));
    if (0 == rc) {
        VMT_OPTS(vmt_device_ops, ops, .name = m->res.cache_name, .reg = dev_reg,
                 .dereg = dev_dereg);
        rc = vmt_device_attach(C.cache, &ops, m, &m->dev);
        if (rc < 0)
            snprintf(why, sizeof(why), "vmt_device_attach: %s", vmt_strerror(rc));
    }
    if (0 == rc) {
        m->next = C.modules;
        C.modules = m;
        pick_leader_locked();
    }
    pthread_mutex_unlock(&C.lock);
    if (0 != rc) {
        opal_output(0, "rcache vmtrack: cannot create a module for \"%s\": %s",
                    m->res.cache_name, why);
        vmt_ompi_module_base_fini(&m->super);
        free(m->res.cache_name);
        free(m);
        return NULL;
    }
    opal_output_verbose(10, C.output, "rcache vmtrack: module for \"%s\" (sizeof_reg %zu): %s, "
                        "tracker %s", m->res.cache_name, m->res.sizeof_reg, mode_name(m->mode),
                        C.tracker_in_use);
    return &m->super;
}
