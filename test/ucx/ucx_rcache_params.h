/* The ucs_rcache_params_t the UCX tests start from, so that each test sets only what it is
 * about (region size, alignment, its ops, and any limit or flag) and not the fields every
 * test's rcache shares. */
#ifndef VMTRACK_TEST_UCX_RCACHE_PARAMS_H
#define VMTRACK_TEST_UCX_RCACHE_PARAMS_H
#include <limits.h>
#include <stdint.h>
#include <string.h>
#include <unistd.h>

#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>

/* No limits (max_regions, max_size, max_unreleased), no flags, page-sized max_alignment, and
 * invalidated on VM_UNMAPPED at the priority UCX's own mds use. */
static inline ucs_rcache_params_t ucx_test_rcache_params(size_t region_struct_size,
                                                         size_t alignment,
                                                         const ucs_rcache_ops_t *ops,
                                                         void *context)
{
    ucs_rcache_params_t p;
    memset(&p, 0, sizeof(p));
    p.region_struct_size = region_struct_size;
    p.alignment = alignment;
    p.max_alignment = (size_t)sysconf(_SC_PAGESIZE);
    p.ucm_events = UCM_EVENT_VM_UNMAPPED;
    p.ucm_event_priority = 1000;
    p.ops = ops;
    p.context = context;
    p.max_regions = ULONG_MAX;
    p.max_size = SIZE_MAX;
    p.max_unreleased = SIZE_MAX;
    return p;
}

#endif
