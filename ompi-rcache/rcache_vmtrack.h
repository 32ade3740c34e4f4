/* Open MPI rcache component "vmtrack" (4.1, 5.0, 6.0; what differs: ompi_compat.h): the
 * rcache framework's register/deregister calls served by libvmtrack's process-wide cache
 * (vmt_shared()).
 *
 * How the two layers fit:
 *  - A BTL's resources (register_mem/deregister_mem, reg_data, sizeof_reg) become a vmtrack
 *    device, one per module (registrations carry their module in reg->rcache, which BTLs
 *    call back into, so a device is never shared between modules).
 *  - The device handle IS the BTL's registration: a block of sizeof_reg bytes (preceded by a
 *    small private header) that we fill (rcache, base, bound, alloc_base, access_flags, flags)
 *    before calling the BTL's register_mem on it, exactly as grdma does. base/bound are the
 *    range vmtrack registered (page aligned, possibly merged with neighbours: larger than asked).
 *  - Every rcache_register that goes through the cache is one vmt_get, every rcache_deregister
 *    one vmt_put on the same struct vmt_reg (one per device handle, kept in the registration's
 *    rcache_context; NULL there marks an uncached registration).
 *    vmtrack counts the holds, per thread; reg->ref_count of a cached registration stays 1
 *    (a shared counter would be written by every thread's hit; no 4.1 BTL reads it). The BTL's deregister_mem runs when
 *    vmtrack deregisters: after the last hold is released, and only if the range was
 *    invalidated, evicted, flushed or the module finalized (leave_pinned).
 *  - Registrations vmtrack must not share (CACHE_BYPASS, SO_MEM, CUDA, the reserved flags
 *    that BTLs interpret in register_mem, or when nothing would tell the cache about unmaps)
 *    are "uncached": registered directly for the caller, deregistered at its last deregister.
 */
#ifndef OMPI_RCACHE_VMTRACK_H
#define OMPI_RCACHE_VMTRACK_H

#include "opal_config.h"

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

#include "opal/mca/rcache/rcache.h"
#include "vmtrack.h"

BEGIN_C_DECLS

/* How a module's registrations are kept. */
enum vmt_ompi_mode {
    VMT_OMPI_MODE_TRACKER = 0, /* cached; vmtrack's own tracker (kmod/hooks/uffd) sees events */
    VMT_OMPI_MODE_OPAL,        /* cached; tracker "none", fed by Open MPI's memory hooks */
    VMT_OMPI_MODE_UNCACHED,    /* nothing cached (mpi_leave_pinned=0, or no event source) */
};

typedef struct mca_rcache_vmtrack_module_t {
    mca_rcache_base_module_t super;
    mca_rcache_base_resources_t res;  /* copy; res.cache_name is our strdup */
    struct vmt_device *dev;           /* one vmtrack device per module (ctx = the module) */
    enum vmt_ompi_mode mode;
    struct mca_rcache_vmtrack_module_t *next;   /* component's list of live modules */
    /* Registrations vmtrack deregistered while we were inside Open MPI's memory hook
     * (possibly inside free()): the BTL's deregister_mem runs later, outside the hook. */
    struct vmt_ompi_hdr *gc_head;
    /* statistics of this module (relaxed atomics) */
    uint64_t n_uncached, n_deregister /* uncached */, n_btl_reg, n_btl_dereg, n_events,
        n_forwarded, n_errors;
} mca_rcache_vmtrack_module_t;

typedef struct mca_rcache_vmtrack_component_t {
    mca_rcache_base_component_t super;
    /* MCA parameters */
    unsigned long max_entries;
    unsigned long max_bytes;
    bool print_stats;
    int verbose;
    int output;
    /* state */
    pthread_mutex_t lock;
    mca_rcache_vmtrack_module_t *modules;
    /* In VMT_OMPI_MODE_OPAL, Open MPI calls every module's invalidate_range for each event;
     * only this one forwards it to the shared cache, so the cache sees it once. */
    mca_rcache_vmtrack_module_t *volatile leader;
    struct vmt_cache *cache;       /* vmt_shared(), once a module exists */
    const char *tracker_in_use;    /* vmt_cache_tracker(cache) */
    bool opal_events;              /* Open MPI's memory hooks feed the module invalidate_range */
    /* vmtrack's hooks are the process's one patcher (rcache_vmtrack_takeover.c): C.cache is
     * the hooks cache, and a forwarder feeds Open MPI's memory hooks from it. */
    bool took_over;
    char takeover_note[640];       /* why it was done or not (also at verbose 10) */
} mca_rcache_vmtrack_component_t;

OPAL_DECLSPEC extern mca_rcache_vmtrack_component_t mca_rcache_vmtrack_component;

/* Private header in front of every registration handed to a BTL. 64 bytes keep the BTL's
 * registration cache-line aligned. */
struct vmt_ompi_hdr {
    uint32_t magic;
    uint32_t kind;                 /* VMT_OMPI_KIND_* */
    void *unused;                  /* (the vmtrack registration is in reg->rcache_context) */
    mca_rcache_vmtrack_module_t *module;
    struct vmt_ompi_hdr *gc_next;  /* in the module's deferred-deregistration list */
    unsigned char pad[64 - 2 * sizeof(uint32_t) - 3 * sizeof(void *)];
};
#define VMT_OMPI_HDR_MAGIC 0x766d7472u   /* "vmtr" */
enum { VMT_OMPI_KIND_CACHED = 1, VMT_OMPI_KIND_UNCACHED = 2 };

static inline struct vmt_ompi_hdr *vmt_ompi_hdr_of(mca_rcache_base_registration_t *reg)
{
    return (struct vmt_ompi_hdr *) ((char *) reg - sizeof(struct vmt_ompi_hdr));
}

/* Module (rcache_vmtrack_module.c) */
mca_rcache_base_module_t *vmt_ompi_module_create(mca_rcache_base_resources_t *resources);
/* Access-flag translation (exposed for tests). */
unsigned vmt_ompi_access_to_vmt(int32_t mca_access);
int32_t vmt_ompi_access_to_mca(unsigned vmt_access);
/* Component side: pick the shared cache's tracker and the mode (under the component lock). */
int vmt_ompi_shared_cache(enum vmt_ompi_mode *mode, char *why, size_t whylen);
/* The effective selection of framework `name` ("btl", "memory"...), also before the framework
 * registered its variable (then read from the environment and the parameter files the way Open
 * MPI will). Copied into buf; NULL when unset. *source_out (may be NULL): where it was set,
 * NULL for the default. */
const char *vmt_ompi_framework_selection(const char *name, char *buf, size_t len,
                                         const char **source_out);

/* Open MPI 5.0+ (rcache_vmtrack_grdma.c): add a "grdma" entry served by vmtrack to the rcache
 * framework's component list, unless grdma itself is there. true when added. */
bool vmt_ompi_serve_grdma(void);

/* Takeover (rcache_vmtrack_takeover.c): at the component's open, make vmtrack's hooks the only
 * patcher when nothing else can have patched yet; at close, stop forwarding. The guard warns
 * once when libc's entries were rewritten after the takeover. */
void vmt_ompi_takeover(void);
void vmt_ompi_takeover_close(void);
void vmt_ompi_takeover_guard(void);
/* Component helpers the takeover uses. */
bool vmt_ompi_kmod_usable(void);
const char *vmt_ompi_tracker_param(void);   /* rcache_vmtrack_tracker as a name */
void vmt_ompi_apply_limits(void);           /* max_entries/max_bytes for vmt_shared() */

END_C_DECLS
#endif
