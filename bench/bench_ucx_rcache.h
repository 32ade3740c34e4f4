/* The ucs_rcache that UCX's side of `vmtrack bench --compare-ucx` measures, for the hit
 * benchmark (bench_ucx.c) and the miss workloads (bench_ucx_miss.c) alike, so that the two
 * compare vmtrack against the same UCX configuration. */
#ifndef VMTRACK_BENCH_UCX_RCACHE_H
#define VMTRACK_BENCH_UCX_RCACHE_H
#include <stdint.h>
#include <string.h>
#include <unistd.h>
#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>

/* Page-aligned plain regions, invalidated on VM_UNMAPPED, at most max_regions regions and no
 * byte limits: the flags of UCX's ib md (uct_md_set_rcache_params) without PURGE_ON_FORK.
 * Not UCS_RCACHE_FLAG_NO_PFN_CHECK: in UCX 1.13 the LRU eviction runs only where the PFN check
 * does (ucs_rcache_create_region), so that flag would also switch max_regions off. The check
 * itself costs nothing here: UCX_RCACHE_CHECK_PFN is 0 by default. */
static inline ucs_status_t bench_ucx_rcache_create(const ucs_rcache_ops_t *ops,
                                                   unsigned long max_regions, const char *name,
                                                   ucs_rcache_t **rcache)
{
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    ucs_rcache_params_t params;
    memset(&params, 0, sizeof(params));
    params.region_struct_size = sizeof(ucs_rcache_region_t);
    params.alignment          = page;
    params.max_alignment      = page;
    params.ucm_events         = UCM_EVENT_VM_UNMAPPED;
    params.ucm_event_priority = 1000;
    params.ops                = ops;
    params.context            = NULL;
    params.flags              = 0;
    params.max_regions        = max_regions;
    params.max_size           = SIZE_MAX;
    params.max_unreleased     = SIZE_MAX;
    return ucs_rcache_create(&params, name, NULL, rcache);
}

#endif
