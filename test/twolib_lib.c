/* One of two separately built shared libraries (test/libtwolib_a.la, test/libtwolib_b.la, both
 * from this file) that each use the process-wide cache on the same ring, as two independent
 * libraries in one program would. */
#include <errno.h>
#include <stddef.h>

#include <vmtrack.h>
#include <vmtrack/iouring.h>

#ifndef TWOLIB_NAME
#error "TWOLIB_NAME must be defined"
#endif

const char *twolib_name(void) { return TWOLIB_NAME; }

/* Attach the ring to the shared cache and register [buf, buf+len): the device, the held
 * registration and its fixed-buffer index come back. 0 or a negative errno. */
int twolib_register(struct io_uring *ring, void *buf, size_t len, struct vmt_device **dev,
                    struct vmt_reg **reg, int *index)
{
    struct vmt_cache *c = vmt_shared();
    if (!c)
        return errno ? -errno : -EIO;
    int ret = vmt_iouring_attach(c, ring, 0, dev);
    if (ret < 0)
        return ret;
    ret = vmt_get(*dev, buf, len, VMT_ACCESS_READ, reg);
    if (ret < 0) {
        vmt_iouring_detach(*dev);
        return ret;
    }
    *index = vmt_iouring_index(*reg);
    return 0;
}

void twolib_release(struct vmt_device *dev, struct vmt_reg *reg)
{
    vmt_put(reg);
    vmt_iouring_detach(dev);
}
