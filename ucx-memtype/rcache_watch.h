/* UCX 1.13's own rcaches with every region watched and every hit checked (rcache_watch.c).
 * Only called under UCX_SERVE (ucx_release.h), with 1.13-1.16's layouts. */
#ifndef VMTRACK_UCX_RCACHE_WATCH_H
#define VMTRACK_UCX_RCACHE_WATCH_H

#include <errno.h>

#include "ucx_release.h"

/* A libucs rcache whose regions are watched (WATCH) or registered after unmaps in flight
 * (SYNC): ucs_rcache_create's arguments and result. */
ucs_status_t ucx_watch_create(const struct ucx_g1_params *params, const char *name,
                              void *stats_parent, ucx_rcache_t **rcache_p);
/* ucs_rcache_get of a libucs rcache: checked if it is watched, else libucs's. */
ucs_status_t ucx_watch_get(ucx_rcache_t *rcache, void *address, size_t length, int prot,
                           void *arg, struct ucx_g1_region **region_p);
/* ucs_rcache_destroy of a libucs rcache, watched or not. */
void ucx_watch_destroy(ucx_rcache_t *rcache);

/* A vmtrack error as UCX's status, for the registrations both kinds of rcache make. */
static inline ucs_status_t vmt_ucx_errno_to_status(int ret)
{
    switch (ret) {
    case -EFAULT: return UCS_ERR_INVALID_ADDR;
    case -ENOMEM: return UCS_ERR_NO_MEMORY;
    case -ENOSPC: return UCS_ERR_EXCEEDS_LIMIT;
    case -EINVAL: return UCS_ERR_INVALID_PARAM;
    default: return UCS_ERR_IO_ERROR;
    }
}

#endif
