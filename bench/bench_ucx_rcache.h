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

/* Page-aligned plain regions, invalidated on VM_UNMAPPED, no PFN check (the ops register
 * nothing), at most max_regions regions and no byte limits. */
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
    params.flags              = UCS_RCACHE_FLAG_NO_PFN_CHECK;
    params.max_regions        = max_regions;
    params.max_size           = SIZE_MAX;
    params.max_unreleased     = SIZE_MAX;
    return ucs_rcache_create(&params, name, NULL, rcache);
}

#endif
