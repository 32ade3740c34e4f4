// vmtrack_bench_tracker_unmap: what a tracker adds to unmapping and to a miss, measured through
// the public API.
#include "tracker_bench.h"

#include <algorithm>
#include <cerrno>
#include <cstring>
#include <ctime>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include "vmtrack.h"

namespace {

double now_ns()
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

int fake_reg(void *, void *addr, size_t, unsigned, void **handle)
{
    *handle = addr;
    return 0;
}
void fake_dereg(void *, void *) {}

constexpr size_t kLen = 64 << 10;
constexpr int kBatch = 100;

// One batch of mmap+munmap, through libc (hooked or not) or as raw system calls: ns per pair.
double batch(bool raw)
{
    double t0 = now_ns();
    for (int i = 0; i < kBatch; i++) {
        if (raw) {
            long p = syscall(SYS_mmap, 0, kLen, PROT_READ | PROT_WRITE,
                             MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
            syscall(SYS_munmap, p, kLen);
        } else {
            void *p = mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                           -1, 0);
            munmap(p, kLen);
        }
    }
    return (now_ns() - t0) / kBatch;
}

// One batch of munmap of `hole` (nothing mapped there): ns per call.
double hole_batch(void *hole, bool raw)
{
    double t0 = now_ns();
    for (int i = 0; i < kBatch; i++) {
        if (raw)
            syscall(SYS_munmap, hole, kLen);
        else
            munmap(hole, kLen);
    }
    return (now_ns() - t0) / kBatch;
}

// Syscalls are noisy (a VM here): pairs of interleaved batches, the median difference.
template <typename Batch> double median_added(Batch batch_of)
{
    constexpr int kPairs = 41;
    double diff[kPairs];
    for (int r = 0; r < kPairs; r++) {
        double raw = batch_of(true);
        diff[r] = batch_of(false) - raw;
    }
    std::sort(diff, diff + kPairs);
    return diff[kPairs / 2];
}

}  // namespace

extern "C" int vmtrack_bench_tracker_unmap(const char *tracker, struct vmtrack_tracker_unmap_cost *cost)
{
    if (!tracker || !cost)
        return -EINVAL;
    VMT_OPTS(vmt_cache_opts, o, .tracker = tracker);
    struct vmt_cache *c;
    int rc = vmt_cache_create(&o, &c);
    if (rc)
        return rc;
    VMT_OPTS(vmt_device_ops, ops, .name = "bench", .reg = fake_reg, .dereg = fake_dereg);
    static int ctx;
    struct vmt_device *dev;
    rc = vmt_device_attach(c, &ops, &ctx, &dev);
    if (rc) {
        vmt_cache_destroy(c);
        return rc;
    }
    // Something cached elsewhere, so lookups do real work.
    void *held = mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    struct vmt_reg *hr = nullptr;
    if (held != MAP_FAILED) {
        memset(held, 1, kLen);
        if (vmt_get(dev, held, kLen, VMT_ACCESS_READ, &hr))
            hr = nullptr;
    }
    cost->pair_added_ns = median_added(batch);
    // An address range with nothing mapped: reserved by the kernel, then given back.
    void *hole = mmap(nullptr, kLen, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    cost->hook_added_ns = -1;
    if (hole != MAP_FAILED) {
        syscall(SYS_munmap, hole, kLen);
        cost->hook_added_ns = median_added([hole](bool raw) { return hole_batch(hole, raw); });
    }

    constexpr int n = 201;
    double t[n], miss[n];
    int done = 0;
    for (int i = 0; i < n; i++) {
        void *p = mmap(nullptr, kLen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (p == MAP_FAILED)
            break;
        memset(p, 1, kLen);
        struct vmt_reg *reg;
        double t0 = now_ns();
        if (vmt_get(dev, p, kLen, VMT_ACCESS_READ, &reg) == 0)
            vmt_put(reg);
        miss[done] = now_ns() - t0;
        t0 = now_ns();
        munmap(p, kLen);
        t[done++] = now_ns() - t0;
    }
    std::sort(t, t + done);
    std::sort(miss, miss + done);
    cost->watched_ns = done ? t[done / 2] : 0;  // medians
    cost->miss_ns = done ? miss[done / 2] : 0;
    if (hr)
        vmt_put(hr);
    if (held != MAP_FAILED)
        munmap(held, kLen);
    vmt_device_detach(dev);
    vmt_cache_destroy(c);
    return 0;
}
