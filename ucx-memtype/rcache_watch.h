/* UCX's own rcaches with every region watched and every hit checked (rcache_watch.c): under
 * UCX 1.13 (UCX_SERVE) the rcaches the module does not serve, from 1.14 on (UCX_CHECK) UCP's
 * own cache and every other one that needs unmap events. The release's layouts come from
 * ucx_release.c. */
#ifndef VMTRACK_UCX_RCACHE_WATCH_H
#define VMTRACK_UCX_RCACHE_WATCH_H

#include <errno.h>
#include <stdint.h>

#include "ucx_release.h"

/* A libucs rcache whose regions are watched (WATCH) or registered after unmaps in flight
 * (SYNC): ucs_rcache_create's arguments (params of the running release) and result. From
 * 1.14 on UCS_ERR_UNSUPPORTED when its hits could not be checked (said once). */
ucs_status_t ucx_watch_create(const void *params, const char *name, void *stats_parent,
                              ucx_rcache_t **rcache_p);
/* ucs_rcache_get of a libucs rcache, with the arguments as the running release passed them:
 * checked if it is watched, else libucs's. */
ucs_status_t ucx_watch_get(ucx_rcache_t *rcache, void *address, size_t length, uintptr_t a3,
                           uintptr_t a4, uintptr_t a5, uintptr_t a6);
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
