/* Which UCX this process runs with, what the module does with it, and the UCX layouts the
 * module uses: the one place that knows UCX releases apart.
 *
 * libvmtrack-ucx is one binary for every UCX from 1.13 to 1.23, whatever UCX it was built
 * against: it never includes ucs/memory/rcache.h (whose layouts changed in 1.17 and 1.18) and
 * uses the copies below only after ucx_release() said the running UCX has them. UCX's own
 * version call lives in libucp (every UCX library keeps SONAME .so.0, so the loader cannot
 * tell releases apart): the module asks the loaded libucp, or loads the one beside libucs. */
#ifndef VMTRACK_UCX_RELEASE_H
#define VMTRACK_UCX_RELEASE_H

#include <stddef.h>
#include <stdint.h>
#include <ucs/type/status.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VMT_UCX_EXPORT __attribute__((visibility("default")))

/* What the module does under a release (doc/ucx.md, "Which UCX"). */
enum ucx_support {
    UCX_UNKNOWN = 0,    /* not a release the module knows: it stays out of UCX's way */
    UCX_CHECK = 1,      /* 1.14-1.23: UCP's cache hits are inline code in libucp that never
                         * calls ucs_rcache_get, but each calls ucs_pgtable_lookup through
                         * libucp's PLT: the module feeds unmap events (hooks tracker) or
                         * watches UCP's regions and checks every hit in that lookup
                         * (trackers that only watch ranges) */
    UCX_SERVE = 2,      /* 1.13: every UCX cache lookup calls ucs_rcache_get; host-memory
                         * rcaches are served from vmt_shared(), the others are watched */
};

/* The generation of the public rcache API (ucs/memory/rcache.h). */
enum ucx_rcache_api {
    UCX_RCACHE_API_NONE = 0,
    UCX_RCACHE_API_113,     /* 1.13-1.16: ucs_rcache_get(rc, addr, len, prot, arg, region_p) */
    UCX_RCACHE_API_117,     /* 1.17: get takes an alignment; params lose alignment fields */
    UCX_RCACHE_API_118,     /* 1.18 on: ops gain merge, called unconditionally */
};

struct ucx_release {
    unsigned major, minor, patch;
    enum ucx_rcache_api api;
    enum ucx_support support;
    char name[32];          /* "1.18.1", or "unknown" */
    char why[256];          /* for UCX_UNKNOWN: why (said once on stderr) */
};

/* Detected on first call (thread-safe); never NULL. */
const struct ucx_release *ucx_release(void);

/* What the module makes of UCX major.minor.patch (detect's table; tests call it too). */
void ucx_release_classify(unsigned major, unsigned minor, unsigned patch, struct ucx_release *r);

/* One line for a human: what the module does under release r, per tracker. */
void ucx_release_describe(const struct ucx_release *r, char *buf, size_t len);

/* Whether this process's ucs_pgtable_lookup calls reach the module (it was preloaded, or
 * linked before libucs: a module loaded after libucs does not see libucp's calls) and libucs
 * has the functions it forwards to: 0, else a negative errno and why not. Where not, UCP's
 * inline cache hits (1.14 on) cannot be checked. */
int ucx_release_lookups_reach_module(char *why, size_t len);

/* ucm_events of a ucs_rcache_params_t of the running release; -1 when the release is unknown. */
int ucx_release_params_events(const void *params);

/* ---- the rcache layouts of every known release, for the rcaches the module wraps ---------
 * (rcache_watch.c). Byte offsets of ucs_rcache_params_t's fields and the order of
 * ucs_rcache_ops_t's function pointers (x86-64 and every LP64 target; the table in
 * ucx_release.c, from each tag's headers). A region's pgt part (start, end) is at offset 0 and
 * mem_reg/mem_dereg/dump_region keep their prototypes in every release. */
struct ucx_layout {
    size_t params_size;             /* sizeof(ucs_rcache_params_t) */
    size_t region_struct_size;      /* offsets in ucs_rcache_params_t */
    size_t alignment, max_alignment;/* SIZE_MAX from 1.17 on (ucs_rcache_get takes it) */
    size_t ucm_events, ops, context;
    unsigned nops;                  /* function pointers in ucs_rcache_ops_t */
    int merge;                      /* index of merge (1.18 on), or -1 */
    int dump_region;                /* index of dump_region */
};
/* The running release's layouts; NULL when the release is unknown. */
const struct ucx_layout *ucx_release_layout(void);

/* ---- the layouts of UCX 1.13-1.16 (x86-64 and every LP64 target), used under UCX_SERVE ---- */
typedef struct ucx_rcache ucx_rcache_t;    /* UCX's ucs_rcache_t, or a native one */
typedef void (*ucx_comp_cb_t)(void *arg);

struct ucx_g1_list { struct ucx_g1_list *prev, *next; };

struct ucx_g1_region {
    struct {
        uint64_t start, end;
    } super;                /* ucs_pgt_region_t */
    struct ucx_g1_list lru_list, tmp_list, comp_list;
    volatile uint32_t refcount;
    int8_t status;          /* ucs_status_t, a packed enum */
    uint8_t prot;
    uint8_t flags;
    uint8_t lru_flags;
    uint64_t priv;
};

struct ucx_g1_ops {
    ucs_status_t (*mem_reg)(void *context, ucx_rcache_t *rcache, void *arg,
                            struct ucx_g1_region *region, uint16_t flags);
    void (*mem_dereg)(void *context, ucx_rcache_t *rcache, struct ucx_g1_region *region);
    void (*dump_region)(void *context, ucx_rcache_t *rcache, struct ucx_g1_region *region,
                        char *buf, size_t max);
};

struct ucx_g1_params {
    size_t region_struct_size;
    size_t alignment;
    size_t max_alignment;
    int ucm_events;
    int ucm_event_priority;
    const struct ucx_g1_ops *ops;
    void *context;
    int flags;
    unsigned long max_regions;
    size_t max_size;
    size_t max_unreleased;
};

#define UCX_G1_MIN_ALIGNMENT 16             /* UCS_RCACHE_MIN_ALIGNMENT */
#define UCX_G1_REGION_REGISTERED 1u         /* UCS_RCACHE_REGION_FLAG_REGISTERED */
#define UCX_G1_REGION_PGTABLE 2u            /* UCS_RCACHE_REGION_FLAG_PGTABLE */
#define UCX_G1_MEM_REG_HIDE_ERRORS 1u       /* UCS_RCACHE_MEM_REG_HIDE_ERRORS */
#define UCX_G1_FLAG_PURGE_ON_FORK 2         /* UCS_RCACHE_FLAG_PURGE_ON_FORK */

/* libucs's rcache functions (dlsym RTLD_NEXT), for what the module forwards. get_raw is
 * libucs's ucs_rcache_get called with the integer registers and stack slot the module's own
 * export received, untouched: right for the six arguments of 1.13-1.16 and the seven of 1.17
 * on alike (a six-argument callee never reads the seventh). */
struct ucx_real {
    ucs_status_t (*create)(const void *params, const char *name, void *stats_parent,
                           ucx_rcache_t **rcache_p);
    ucs_status_t (*get_g1)(ucx_rcache_t *, void *, size_t, int, void *,
                           struct ucx_g1_region **);
    ucs_status_t (*get_raw)(ucx_rcache_t *, void *, size_t, uintptr_t, uintptr_t, uintptr_t,
                            uintptr_t);
    void (*destroy)(ucx_rcache_t *);
    void (*hold)(ucx_rcache_t *, void *region);
    void (*put)(ucx_rcache_t *, void *region);
    void (*invalidate)(ucx_rcache_t *, void *region, ucx_comp_cb_t, void *);
};
extern struct ucx_real ucx_real;
void ucx_real_resolve(void);            /* idempotent */

#ifdef __cplusplus
}
#endif
#endif
