/* vmtrack device: RDMA verbs (rdma-core). */
#ifndef VMTRACK_VERBS_H
#define VMTRACK_VERBS_H
#include <vmtrack.h>
#ifdef __cplusplus
extern "C" {
#endif
struct ibv_pd;
struct ibv_mr;
/* Attach a protection domain as a device: registrations are ibv_reg_mr on it, with
 * VMT_ACCESS_WRITE -> IBV_ACCESS_LOCAL_WRITE, VMT_ACCESS_REMOTE_READ/WRITE/ATOMIC -> the
 * IBV_ACCESS_REMOTE_* flags (remote write and atomic imply local write, as verbs requires).
 * Attaching the same PD again, from any library in the process, returns the same device.
 * Detach with vmt_device_detach. Errors of ibv_reg_mr come back from vmt_get as -errno.
 * Errors: -EINVAL (NULL cache, pd or out), -ENOMEM. */
int vmt_verbs_attach(struct vmt_cache *cache, struct ibv_pd *pd, struct vmt_device **out);
/* The memory region of a verbs registration (its lkey/rkey), NULL if reg is NULL. */
struct ibv_mr *vmt_verbs_mr(const struct vmt_reg *reg);
#ifdef __cplusplus
}
#endif
#endif
