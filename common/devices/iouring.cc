// The io_uring device: registrations are fixed buffers in a sparse table that vmtrack owns.
//
// Built only on the public API (vmt_device_attach with a vmt_device_ops). One context per ring,
// process-wide, so that every library that attaches the same struct io_uring gets the same
// (ops->reg, ctx) pair and the core's attach refcounting shares the device and its
// registrations. The context holds the slot allocator (a stack of free slot numbers under a
// mutex: a registration is a system call anyway). The handle stored in a registration is
// slot + 1 (never NULL).
#include <cerrno>
#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <pthread.h>
#include <sys/uio.h>

#include <liburing.h>
#include <vmtrack/iouring.h>

#include "util/log.h"

namespace {

constexpr unsigned kMaxSlots = 16384;                 // IORING_MAX_REG_BUFFERS
constexpr size_t kMaxBufferBytes = size_t(1) << 30;  // the kernel's limit per fixed buffer

struct RingCtx {
    RingCtx *next = nullptr;            // in g_rings
    struct io_uring *ring = nullptr;
    int ring_fd = -1;                   // to notice a ring freed and another made at its address
    unsigned slots = 0;
    unsigned attached = 0;              // vmt_iouring_attach calls not yet detached (g_mu)
    std::mutex mu;                      // the slot allocator
    unsigned nfree = 0;
    uint32_t *free_slots = nullptr;     // stack of free slot numbers
    struct vmt_device_ops ops;
};

std::mutex g_mu;                        // g_rings and RingCtx::attached
RingCtx *g_rings = nullptr;
pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

// In a fork child the parent's rings and tables belong to the parent: forget them without
// touching them (the core gives the child no devices either). The contexts are leaked on
// purpose: the child must not free what its copy of the parent's state may still point to.
void after_fork_child()
{
    new (&g_mu) std::mutex();
    g_rings = nullptr;
}

void install_atfork() { pthread_atfork(nullptr, nullptr, after_fork_child); }

int iou_reg(void *ctxp, void *addr, size_t len, unsigned access, void **handle)
{
    RingCtx *ctx = static_cast<RingCtx *>(ctxp);
    (void)access;  // fixed buffers do not distinguish reading from writing: any rights do
    if (!addr || !len || len > kMaxBufferBytes || !handle)
        return -EINVAL;
    uint32_t slot;
    {
        std::lock_guard<std::mutex> lk(ctx->mu);
        if (ctx->nfree == 0)
            return -ENOSPC;  // the cache evicts and retries
        slot = ctx->free_slots[--ctx->nfree];
    }
    struct iovec iov = {addr, len};
    __u64 tag = 0;
    int ret = io_uring_register_buffers_update_tag(ctx->ring, slot, &iov, &tag, 1);
    if (ret != 1) {
        {
            std::lock_guard<std::mutex> lk(ctx->mu);
            ctx->free_slots[ctx->nfree++] = slot;
        }
        return ret < 0 ? ret : -EIO;
    }
    *handle = reinterpret_cast<void *>(uintptr_t(slot) + 1);
    return 0;
}

void iou_dereg(void *ctxp, void *handle)
{
    RingCtx *ctx = static_cast<RingCtx *>(ctxp);
    uintptr_t h = reinterpret_cast<uintptr_t>(handle);
    if (h == 0 || h > ctx->slots) {
        VMT_LOG_ERROR("io_uring device: bad handle %p in dereg (ignored)", handle);
        return;
    }
    uint32_t slot = uint32_t(h - 1);
    struct iovec iov = {nullptr, 0};
    __u64 tag = 0;
    int ret = io_uring_register_buffers_update_tag(ctx->ring, slot, &iov, &tag, 1);
    if (ret != 1) {
        // The slot still holds the old buffer: do not hand it out again (a later update
        // would replace it anyway, but say so and keep the table consistent).
        VMT_LOG_ERROR("io_uring device: emptying fixed buffer %u failed: %s", slot,
                      strerror(ret < 0 ? -ret : EIO));
        return;
    }
    std::lock_guard<std::mutex> lk(ctx->mu);
    ctx->free_slots[ctx->nfree++] = slot;
}

RingCtx *find_locked(struct io_uring *ring)
{
    for (RingCtx *c = g_rings; c; c = c->next)
        if (c->ring == ring)
            return c;
    return nullptr;
}

void unlink_locked(RingCtx *ctx)
{
    for (RingCtx **pp = &g_rings; *pp; pp = &(*pp)->next)
        if (*pp == ctx) {
            *pp = ctx->next;
            return;
        }
}

void free_ctx(RingCtx *ctx)
{
    free(ctx->free_slots);
    delete ctx;
}

}  // namespace

extern "C" int vmt_iouring_attach(struct vmt_cache *cache, struct io_uring *ring, unsigned slots,
                                  struct vmt_device **out)
{
    if (!cache || !ring || !out)
        return -EINVAL;
    if (slots == 0)
        slots = kMaxSlots;
    if (slots > kMaxSlots)
        return -EINVAL;
    pthread_once(&g_atfork_once, install_atfork);

    std::lock_guard<std::mutex> lk(g_mu);
    RingCtx *ctx = find_locked(ring);
    if (ctx && ctx->ring_fd != ring->ring_fd) {
        // The ring this context was made for is gone (its memory reused by a new ring)
        // without being detached: forget it (leaked: a device may still name it).
        unlink_locked(ctx);
        ctx = nullptr;
    }
    bool created = false;
    if (!ctx) {
        ctx = new (std::nothrow) RingCtx;
        if (!ctx)
            return -ENOMEM;
        ctx->free_slots = static_cast<uint32_t *>(calloc(slots, sizeof(uint32_t)));
        if (!ctx->free_slots) {
            delete ctx;
            return -ENOMEM;
        }
        int ret = io_uring_register_buffers_sparse(ring, slots);
        if (ret < 0) {  // -EBUSY: the ring already has a table that vmtrack did not make
            free_ctx(ctx);
            return ret;
        }
        ctx->ring = ring;
        ctx->ring_fd = ring->ring_fd;
        ctx->slots = slots;
        // Hand out low slots first.
        for (unsigned i = 0; i < slots; i++)
            ctx->free_slots[i] = slots - 1 - i;
        ctx->nfree = slots;
        // pinning fails with -EFAULT on a hole: the registration is the mapped check
        VMT_OPTS(vmt_device_ops, ops, .name = "io_uring", .reg = iou_reg, .dereg = iou_dereg,
                 .max_regions = slots, .max_region_bytes = kMaxBufferBytes,
                 .flags = VMT_DEVICE_CHECKS_MAPPED);
        ctx->ops = ops;
        created = true;
    }
    int ret = vmt_device_attach(cache, &ctx->ops, ctx, out);
    if (ret < 0) {
        if (created) {
            io_uring_unregister_buffers(ring);
            free_ctx(ctx);
        }
        return ret;
    }
    if (created) {
        ctx->next = g_rings;
        g_rings = ctx;
    }
    ctx->attached++;
    return 0;
}

extern "C" int vmt_iouring_index(const struct vmt_reg *reg)
{
    if (!reg)
        return -EINVAL;
    uintptr_t h = reinterpret_cast<uintptr_t>(vmt_reg_handle(reg));
    if (h == 0 || h > kMaxSlots)
        return -EINVAL;
    return int(h - 1);
}

extern "C" void vmt_iouring_detach(struct vmt_device *dev)
{
    if (!dev)
        return;
    RingCtx *ctx = static_cast<RingCtx *>(vmt_device_ctx(dev));
    vmt_device_detach(dev);  // deregisters what only this device held
    std::lock_guard<std::mutex> lk(g_mu);
    bool known = false;
    for (RingCtx *c = g_rings; c; c = c->next)
        known |= (c == ctx);
    if (!known || ctx->attached == 0)
        return;
    if (--ctx->attached == 0) {
        unlink_locked(ctx);
        io_uring_unregister_buffers(ctx->ring);
        std::unique_lock<std::mutex> slk(ctx->mu);
        bool busy = ctx->nfree != ctx->slots;
        slk.unlock();
        if (busy)  // a registration not yet put (API misuse): keep the context for its dereg
            VMT_LOG_WARN("io_uring device detached with %u fixed buffers still held",
                         ctx->slots - ctx->nfree);
        else
            free_ctx(ctx);
    }
}
