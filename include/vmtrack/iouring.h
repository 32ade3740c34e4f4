/* vmtrack device: io_uring fixed buffers (liburing). */
#ifndef VMTRACK_IOURING_H
#define VMTRACK_IOURING_H
#include <vmtrack.h>
#ifdef __cplusplus
extern "C" {
#endif
struct io_uring;
/* Attach a ring as a device. The ring gets a sparse fixed-buffer table of `slots` entries
 * (0: the kernel's maximum, 16384) owned by vmtrack; -EBUSY if the ring already has one.
 * Since 0.1: attaching the same ring again, from any library in the process, returns the same
 * device (its registrations are shared); `slots` is then ignored. More than 16384 slots:
 * -EINVAL. Each fixed buffer is at most 1 GiB (the kernel's limit); when every slot is in use
 * the cache evicts, else vmt_get returns -ENOSPC. Fixed buffers do not distinguish reading from
 * writing: a registration made for any access serves READ_FIXED and WRITE_FIXED alike.
 * Registration calls io_uring_register() from the thread calling vmt_get: a ring created with
 * IORING_SETUP_SINGLE_ISSUER must only be used from that thread. After fork(), the child's copy
 * of a ring is the parent's ring (same kernel object, same table): a child attaches a ring of
 * its own. Errors: -EINVAL (NULL, more than 16384 slots), -EBUSY, -ENOMEM, or the error of
 * io_uring_register(); then as vmt_device_attach. */
int vmt_iouring_attach(struct vmt_cache *cache, struct io_uring *ring, unsigned slots,
                       struct vmt_device **out);
/* The fixed-buffer index to pass to READ_FIXED / WRITE_FIXED for this registration
 * (-EINVAL if reg is NULL or not an io_uring registration). */
int vmt_iouring_index(const struct vmt_reg *reg);
/* Since 0.1. Detach a device returned by vmt_iouring_attach. When the last attachment of the
 * ring is detached, the fixed-buffer table is unregistered from the ring (the ring itself stays
 * the caller's). vmt_device_detach also works but leaves the table registered. */
void vmt_iouring_detach(struct vmt_device *dev);
#ifdef __cplusplus
}
#endif
#endif
