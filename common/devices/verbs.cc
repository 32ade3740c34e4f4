// The verbs device: a registration is an ibv_mr on the protection domain given to attach.
//
// Built only on the public API. The device context is the struct ibv_pd itself and the ops
// are one static table, so every library in the process that attaches the same PD gets the
// same (ops->reg, ctx) pair, i.e. the same device and the same registrations.
#include <cerrno>
#include <cstdint>

#include <infiniband/verbs.h>
#include <vmtrack/verbs.h>

namespace {

int access_to_ibv(unsigned access)
{
    int f = 0;
    if (access & VMT_ACCESS_WRITE)
        f |= IBV_ACCESS_LOCAL_WRITE;
    if (access & VMT_ACCESS_REMOTE_READ)
        f |= IBV_ACCESS_REMOTE_READ;
    // Verbs requires local write with remote write or atomic access.
    if (access & VMT_ACCESS_REMOTE_WRITE)
        f |= IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_LOCAL_WRITE;
    if (access & VMT_ACCESS_REMOTE_ATOMIC)
        f |= IBV_ACCESS_REMOTE_ATOMIC | IBV_ACCESS_LOCAL_WRITE;
    return f;
}

int verbs_reg(void *ctx, void *addr, size_t len, unsigned access, void **handle)
{
    struct ibv_pd *pd = static_cast<struct ibv_pd *>(ctx);
    if (!pd || !addr || !len || !handle || (access & ~unsigned(VMT_ACCESS_ALL)))
        return -EINVAL;
    errno = 0;
    struct ibv_mr *mr = ibv_reg_mr(pd, addr, len, access_to_ibv(access));
    if (!mr)
        return errno > 0 ? -errno : -EIO;
    *handle = mr;
    return 0;
}

void verbs_dereg(void *ctx, void *handle)
{
    (void)ctx;
    if (handle)
        ibv_dereg_mr(static_cast<struct ibv_mr *>(handle));
}

const struct vmt_device_ops kVerbsOps = {
    sizeof(struct vmt_device_ops), "verbs", verbs_reg, verbs_dereg,
    0,  // no limit of our own: the driver says -ENOMEM when out of MRs and the cache evicts
    0,
    // ibv_reg_mr pins the pages (ib_umem_get) and fails with EFAULT on a hole
    VMT_DEVICE_CHECKS_MAPPED,
    0,  // no byte budget: the driver's own limits say -ENOMEM
};

}  // namespace

extern "C" int vmt_verbs_attach(struct vmt_cache *cache, struct ibv_pd *pd,
                                struct vmt_device **out)
{
    if (!cache || !pd || !out)
        return -EINVAL;
    return vmt_device_attach(cache, &kVerbsOps, pd, out);
}

extern "C" struct ibv_mr *vmt_verbs_mr(const struct vmt_reg *reg)
{
    return reg ? static_cast<struct ibv_mr *>(vmt_reg_handle(reg)) : nullptr;
}
