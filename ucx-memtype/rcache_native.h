/* The host-memory rcaches libvmtrack-ucx serves from vmt_shared() (rcache_native.c), as seen
 * by the interposers in vmtrack_ucx.c. Each call returns 0 when the rcache is not (or cannot
 * become) native: the caller then forwards it to libucs. */
#ifndef VMTRACK_UCX_RCACHE_NATIVE_H
#define VMTRACK_UCX_RCACHE_NATIVE_H

#include <stdint.h>
#include <ucs/memory/rcache.h>

#define VMT_UCX_EXPORT __attribute__((visibility("default")))

/* libucs's own six functions (dlsym RTLD_NEXT), for what the module forwards */
struct vmt_ucx_real {
    ucs_status_t (*create)(const ucs_rcache_params_t *, const char *, ucs_stats_node_t *,
                           ucs_rcache_t **);
    ucs_status_t (*get)(ucs_rcache_t *, void *, size_t, int, void *, ucs_rcache_region_t **);
    void (*destroy)(ucs_rcache_t *);
    void (*hold)(ucs_rcache_t *, ucs_rcache_region_t *);
    void (*put)(ucs_rcache_t *, ucs_rcache_region_t *);
    void (*invalidate)(ucs_rcache_t *, ucs_rcache_region_t *, ucs_rcache_invalidate_comp_func_t,
                       void *);
};
extern struct vmt_ucx_real vmt_ucx_real;
void vmt_ucx_resolve_real(void);     /* idempotent */

/* 1 and *rcache_p set: served by vmtrack; 0: forward; < 0: an errno (out of memory). */
int vmt_ucx_native_create(const ucs_rcache_params_t *params, const char *name,
                          ucs_rcache_t **rcache_p);
/* ucs_rcache_get of an rcache that is not native: libucs's, with the event feed's checks
 * (vmtrack_ucx.c). */
ucs_status_t vmt_ucx_feed_get(ucs_rcache_t *rcache, void *address, size_t length, int prot,
                              void *arg, ucs_rcache_region_t **region_p);
int vmt_ucx_native_destroy(ucs_rcache_t *rcache);
void vmt_ucx_note_forwarded(void);
/* What UCX's ucs_rcache_create accepts (rcache.c checks the same): anything else goes to
 * libucs as given, so that UCX refuses it with its own message. */
int vmt_ucx_params_valid(const ucs_rcache_params_t *params);
void vmt_ucx_native_counts(uint64_t *native, uint64_t *forwarded);

#endif
