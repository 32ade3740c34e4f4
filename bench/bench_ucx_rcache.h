/* The ucs_rcache that UCX's side of `vmtrack bench --compare-ucx` measures, for the hit
 * benchmark (bench_ucx.c) and the miss workloads (bench_ucx_miss.c) alike, so that the two
 * compare vmtrack against the same UCX configuration.
 *
 * It is also the one place where the benches meet the generations of UCX's rcache API, which
 * configure tells apart (configure.ac, "UCX"):
 *   1.13-1.16  the alignment is a creation parameter (params.alignment, max_alignment);
 *   1.17       ucs_rcache_get takes the alignment instead (VMT_UCX_RCACHE_GET_ALIGNMENT);
 *   1.18 on    ucs_rcache_ops_t gains merge, which UCX calls without a NULL check
 *              (VMT_UCX_RCACHE_OPS_MERGE).
 * Regions are page-aligned in every generation. */
#ifndef VMTRACK_BENCH_UCX_RCACHE_H
#define VMTRACK_BENCH_UCX_RCACHE_H
#include "config.h"
#include <stdint.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>
#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>

/* Asked once: on 1.17 on, every lookup passes it. */
static inline size_t bench_ucx_page(void)
{
    static size_t page;
    if (!page)
        page = (size_t)sysconf(_SC_PAGESIZE);
    return page;
}

#ifdef VMT_UCX_RCACHE_OPS_MERGE
/* A region merged into a new one: the benches' null devices keep nothing per region. */
static inline void bench_ucx_merge(void *context, ucs_rcache_t *rcache, void *arg,
                                   ucs_rcache_region_t *region)
{
    (void)context; (void)rcache; (void)arg; (void)region;
}
#define BENCH_UCX_RCACHE_OPS(reg, dereg) \
    { .mem_reg = (reg), .mem_dereg = (dereg), .merge = bench_ucx_merge }
#else
#define BENCH_UCX_RCACHE_OPS(reg, dereg) { .mem_reg = (reg), .mem_dereg = (dereg) }
#endif

/* Page-aligned plain regions, invalidated on VM_UNMAPPED, at most max_regions regions and no
 * byte limits: the flags of UCX's ib md (uct_md_set_rcache_params) without PURGE_ON_FORK.
 * Not UCS_RCACHE_FLAG_NO_PFN_CHECK: in UCX 1.13 the LRU eviction runs only where the PFN check
 * does (ucs_rcache_create_region), so that flag would also switch max_regions off. The check
 * itself costs nothing here: UCX_RCACHE_CHECK_PFN is 0 by default. */
static inline ucs_status_t bench_ucx_rcache_create(const ucs_rcache_ops_t *ops,
                                                   unsigned long max_regions, const char *name,
                                                   ucs_rcache_t **rcache)
{
    ucs_rcache_params_t params;
    memset(&params, 0, sizeof(params));
    params.region_struct_size = sizeof(ucs_rcache_region_t);
#ifndef VMT_UCX_RCACHE_GET_ALIGNMENT
    params.alignment          = bench_ucx_page();
    params.max_alignment      = bench_ucx_page();
#endif
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

/* A read-write region of [addr, addr + len), page-aligned. */
static inline ucs_status_t bench_ucx_rcache_get(ucs_rcache_t *rcache, void *addr, size_t len,
                                                ucs_rcache_region_t **region)
{
#ifdef VMT_UCX_RCACHE_GET_ALIGNMENT
    return ucs_rcache_get(rcache, addr, len, bench_ucx_page(), PROT_READ | PROT_WRITE, NULL,
                          region);
#else
    return ucs_rcache_get(rcache, addr, len, PROT_READ | PROT_WRITE, NULL, region);
#endif
}

#endif
