// The io_uring device: registrations are fixed buffers in a table that vmtrack owns.
//
// The table is made the best way the running kernel allows, tried in this order:
//   sparse  (Linux 5.19+): IORING_RSRC_REGISTER_SPARSE, then one tagged update per slot;
//   tagged  (5.13+): a table of empty iovecs (IORING_REGISTER_BUFFERS2), updated the same way;
//   whole   (5.1+): no updates at all: every reg/dereg unregisters the table and registers it
//           again with the slot changed; empty slots point at a one-page filler (old kernels
//           refuse empty iovecs). Correct but slow, and each change waits until the ring has
//           no request in flight (the kernel quiesces it): the default table is small.
// Distribution kernels (RHEL 9's and SLES 15's 5.14, Ubuntu 22.04's 5.15) may have any of them.
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
constexpr unsigned kWholeTableDefaultSlots = 64;     // every change re-registers them all

enum class Table { sparse, tagged, whole };

const char *table_name(Table t)
{
    switch (t) {
    case Table::sparse: return "sparse table (Linux 5.19+)";
    case Table::tagged: return "table of empty slots with tagged updates (Linux 5.13+)";
    case Table::whole: return "whole-table registration (Linux 5.1+, no buffer updates)";
    }
    return "?";
}

struct RingCtx {
    RingCtx *next = nullptr;            // in g_rings
    struct io_uring *ring = nullptr;
    int ring_fd = -1;                   // to notice a ring freed and another made at its address
    unsigned slots = 0;
    unsigned attached = 0;              // vmt_iouring_attach calls not yet detached (g_mu)
    std::mutex mu;                      // the slot allocator
    unsigned nfree = 0;
    uint32_t *free_slots = nullptr;     // stack of free slot numbers
    Table table = Table::sparse;
    std::mutex table_mu;                // Table::whole: iov, and the unregister/register pair
    struct iovec *iov = nullptr;        // Table::whole: what the kernel's table holds
    void *filler = nullptr;             // Table::whole: the page empty slots point at
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

// Table::whole: register the table again with slot changed; on failure the old table is put
// back so that the other slots stay registered.
int set_slot_whole(RingCtx *ctx, uint32_t slot, void *addr, size_t len)
{
    std::lock_guard<std::mutex> lk(ctx->table_mu);
    struct iovec old = ctx->iov[slot];
    ctx->iov[slot] = addr ? iovec{addr, len} : iovec{ctx->filler, 4096};
    int ret = io_uring_unregister_buffers(ctx->ring);
    if (ret == 0)
        ret = io_uring_register_buffers(ctx->ring, ctx->iov, ctx->slots);
    if (ret < 0) {
        ctx->iov[slot] = old;
        if (io_uring_register_buffers(ctx->ring, ctx->iov, ctx->slots) < 0)
            VMT_LOG_ERROR("io_uring device: the fixed-buffer table could not be registered "
                          "again: %s; fixed-buffer I/O on this ring fails", strerror(-ret));
        return ret;
    }
    return 1;
}

// Put [addr, addr+len) (addr NULL: nothing) into slot; 1 on success like the update calls.
int set_slot(RingCtx *ctx, uint32_t slot, void *addr, size_t len)
{
    if (ctx->table == Table::whole)
        return set_slot_whole(ctx, slot, addr, len);
    struct iovec iov = {addr, addr ? len : 0};
    __u64 tag = 0;
    return io_uring_register_buffers_update_tag(ctx->ring, slot, &iov, &tag, 1);
}

// VMTRACK_IOURING_TABLE=tagged or whole starts from that kind (tests of the older kernels'
// paths on a new kernel); unset or sparse: the best one.
Table first_table_to_try()
{
    const char *e = getenv("VMTRACK_IOURING_TABLE");
    if (e && strcmp(e, "tagged") == 0)
        return Table::tagged;
    if (e && strcmp(e, "whole") == 0)
        return Table::whole;
    if (e && *e && strcmp(e, "sparse") != 0)
        VMT_LOG_WARN("VMTRACK_IOURING_TABLE=%s: want sparse, tagged or whole (using sparse)", e);
    return Table::sparse;
}

// Register a table of `slots` empty slots (0: the default for the kind this kernel allows).
int create_table(RingCtx *ctx, struct io_uring *ring, unsigned slots)
{
    Table first = first_table_to_try();
    int ret = -EINVAL;
    if (first == Table::sparse)
        ret = io_uring_register_buffers_sparse(ring, slots ? slots : kMaxSlots);
    if (ret == 0) {
        ctx->table = Table::sparse;
        ctx->slots = slots ? slots : kMaxSlots;
        return 0;
    }
    if (ret != -EINVAL)  // -EBUSY: the ring already has a table that vmtrack did not make
        return ret;
    unsigned n = slots ? slots : kMaxSlots;
    struct iovec *iov = static_cast<struct iovec *>(calloc(n, sizeof(*iov)));
    __u64 *tags = static_cast<__u64 *>(calloc(n, sizeof(*tags)));
    if (!iov || !tags) {
        free(iov);
        free(tags);
        return -ENOMEM;
    }
    ret = first != Table::whole ? io_uring_register_buffers_tags(ring, iov, tags, n) : -EINVAL;
    free(tags);
    if (ret == 0) {
        free(iov);
        ctx->table = Table::tagged;
        ctx->slots = n;
        return 0;
    }
    // No updates on this kernel: a small table of fillers, re-registered on every change.
    n = slots ? slots : kWholeTableDefaultSlots;
    ctx->filler = aligned_alloc(4096, 4096);
    struct iovec *whole = static_cast<struct iovec *>(realloc(iov, n * sizeof(*iov)));
    if (!ctx->filler || !whole) {
        free(whole ? whole : iov);
        return -ENOMEM;
    }
    for (unsigned i = 0; i < n; i++)
        whole[i] = iovec{ctx->filler, 4096};
    ret = io_uring_register_buffers(ring, whole, n);
    if (ret < 0) {
        free(whole);
        return ret;
    }
    ctx->iov = whole;
    ctx->table = Table::whole;
    ctx->slots = n;
    return 0;
}

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
    int ret = set_slot(ctx, slot, addr, len);
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
    int ret = set_slot(ctx, slot, nullptr, 0);
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
    free(ctx->iov);
    free(ctx->filler);
    delete ctx;
}

}  // namespace

extern "C" int vmt_iouring_attach(struct vmt_cache *cache, struct io_uring *ring, unsigned slots,
                                  struct vmt_device **out)
{
    if (!cache || !ring || !out)
        return -EINVAL;
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
        int ret = create_table(ctx, ring, slots);
        if (ret < 0) {
            free_ctx(ctx);
            return ret;
        }
        ctx->free_slots = static_cast<uint32_t *>(calloc(ctx->slots, sizeof(uint32_t)));
        if (!ctx->free_slots) {
            io_uring_unregister_buffers(ring);
            free_ctx(ctx);
            return -ENOMEM;
        }
        if (ctx->table != Table::sparse)
            VMT_LOG_INFO("io_uring device: %u slots, %s", ctx->slots, table_name(ctx->table));
        ctx->ring = ring;
        ctx->ring_fd = ring->ring_fd;
        slots = ctx->slots;
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
