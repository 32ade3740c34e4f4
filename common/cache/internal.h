// What the cache's files share and nobody else needs: page arithmetic, the fence a reader
// pays after publishing a hold, the list of all caches (for fork) and the fork handlers'
// installation. The invariants live in the files that rely on them (hit.cc: memo and holds;
// miss.cc: inserting only what nothing invalidated; retire.cc: deregistering only what nobody
// holds; events.cc: invalidation before the unmap returns; fork.cc: the child's state).
#ifndef VMTRACK_COMMON_CACHE_INTERNAL_H
#define VMTRACK_COMMON_CACHE_INTERNAL_H

#include <atomic>
#include <cstdint>
#include <mutex>

#include "cache/cache.h"
#include "index/holds.h"

namespace vmt {

constexpr int kHitSpins = 64;  // sequence retries before a lock-free reader gives up

// Registrations are in base pages; on x86-64 Linux these are always 4 KiB.
constexpr uintptr_t kPageSize = 4096;
constexpr uintptr_t page_size() { return kPageSize; }

// Orders the hold just published before the re-check that follows; the retirer's membarrier
// is the other half. Where membarrier is missing, the reader pays for a real fence.
inline void publish_fence()
{
    if (__builtin_expect(g_readers_fence.load(std::memory_order_relaxed), 0))
        std::atomic_thread_fence(std::memory_order_seq_cst);
    else
        std::atomic_signal_fence(std::memory_order_seq_cst);
    std::atomic_thread_fence(std::memory_order_acquire);
}

// For a counter that changes only under the index lock and is read without it: a plain load
// and store, not a locked read-modify-write (a miss changes several).
template <typename T>
inline void add_under_lock(std::atomic<T> &counter, T delta)
{
    counter.store(counter.load(std::memory_order_relaxed) + delta, std::memory_order_relaxed);
}

// How many device reg calls this thread is inside (Cache::reg_evicting). A device may hold
// its own lock across reg and dereg (UCX's md lock), so nothing is deregistered while one
// runs (Cache::defer_reclaim).
extern __thread int t_device_reg_depth __attribute__((tls_model("initial-exec")));
// How many caches' reclaims this thread's device reg calls put off (Cache::defer_reclaim).
extern __thread int t_reclaims_deferred __attribute__((tls_model("initial-exec")));

// Every cache of the process, for the fork handlers (fork.cc); under g_caches_lock.
extern std::mutex g_caches_lock;
extern Cache *g_caches_list;

// Installs the fork handlers once per process (fork.cc).
void install_fork_handlers() noexcept;

}  // namespace vmt

#endif
