// The record of changes a tracker reports before they happen (vmt_changes_mark,
// vmt_changed_since): for a consumer that learns of a range only after something pinned its
// pages, as libfabric's monitor does at subscribe, and must prove the pages did not change
// since an earlier moment.
//
// The cache keeps one where its tracker hears every change of the address space before the
// system call makes it (hooks: unmap_begin runs in the unmapping thread before munmap, mremap,
// madvise, mmap(MAP_FIXED), brk, shmdt reach the kernel). kmod's module keeps its own, of every
// invalidation in the kernel (Tracker::change_mark): the cache hands the questions on. uffd
// hears after the change: -ENOTSUP, and such a consumer watches first.
//
// A ring of the last kChangeLog writes, numbered from the log's base. A change is written twice:
// before the system call (unmap_begin), so that a check while it is under way sees it, and
// after it (unmap_end, before the misses it held go on), since the pages change only at the
// system call and a thread may take its mark, and pin the old pages, in between: the second
// number is newer than any such mark. Each write takes its number (fetch_add, seq_cst), then
// writes its slot under the slot's own sequence (odd while written, 2 * number + 2 once
// written). A reader that finds a slot not holding the number it looks for (being written, or
// overwritten by a later change) or a mark more than kChangeLog writes behind answers
// "changed": it can prove nothing then.
#include "config.h"
#include "cache/cache.h"

#include <cerrno>
#include <mutex>
#include <new>

namespace vmt {

struct Cache::ChangeSlot {
    std::atomic<uint64_t> seq{0};
    std::atomic<uintptr_t> start{0}, end{0};
};

// The head's, from the tracker's event calls (unmap_begin, invalidate): no allocation, no lock.
void Cache::log_change(uintptr_t start, size_t len) noexcept
{
    ChangeSlot *log = change_log_.load(std::memory_order_acquire);
    if (!log)
        return;
    uint64_t n = changes_.fetch_add(1, std::memory_order_seq_cst);
    ChangeSlot &s = log[n % kChangeLog];
    s.seq.store(2 * n + 1, std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_release);
    uintptr_t end = start + len < start ? UINTPTR_MAX : start + len;
    s.start.store(start, std::memory_order_relaxed);
    s.end.store(end, std::memory_order_relaxed);
    s.seq.store(2 * n + 2, std::memory_order_release);
}

int Cache::changes_mark(uint64_t *mark) noexcept
{
    if (!caching_)
        return -ENOTSUP;
    if (!tracker_->hears_every_unmap())
        return tracker_->change_mark(mark);
    if (!change_log_.load(std::memory_order_acquire)) {
        // Allocated once, at the first mark (a cache nobody asks keeps no log); never freed
        // before the cache, since a hook may be writing it. Each log numbers from a base of
        // its own, 2^40 apart, so that a mark taken on another cache (one that was at the
        // same address before) is never read as one of this log's: it is ahead of the count
        // (-EINVAL) or far behind it ("changed").
        static std::mutex first_lock;
        static uint64_t next_base = 0;
        std::lock_guard<std::mutex> g(first_lock);
        if (!change_log_.load(std::memory_order_relaxed)) {
            ChangeSlot *log = new (std::nothrow) ChangeSlot[kChangeLog];
            if (!log)
                return -ENOMEM;
            next_base += uint64_t{1} << 40;
            // Writers touch the count only once they see the log (release: after the base).
            changes_.store(next_base, std::memory_order_relaxed);
            change_log_.store(log, std::memory_order_seq_cst);
        }
    }
    // Changes numbered from here on are in the log: the load comes after the log's pointer
    // was published (seq_cst both), so a change that missed the pointer took a lower number.
    *mark = changes_.load(std::memory_order_seq_cst);
    return 0;
}

int Cache::changed_since(uint64_t mark, uintptr_t start, size_t len) const noexcept
{
    if (!tracker_->hears_every_unmap())
        return caching_ ? tracker_->changed_since(mark, start, len) : -EINVAL;
    const ChangeSlot *log = change_log_.load(std::memory_order_acquire);
    if (!log)
        return -EINVAL;  // no mark was ever given
    uint64_t now = changes_.load(std::memory_order_seq_cst);
    if (mark > now || mark == 0)
        return -EINVAL;
    if (now - mark > kChangeLog)
        return 1;  // the changes since then are no longer all here
    uintptr_t end = start + len < start ? UINTPTR_MAX : start + len;
    for (uint64_t n = mark; n < now; n++) {
        const ChangeSlot &s = log[n % kChangeLog];
        uint64_t seq = s.seq.load(std::memory_order_acquire);
        if (seq != 2 * n + 2)
            return 1;  // being written, or a later change's
        uintptr_t cs = s.start.load(std::memory_order_relaxed);
        uintptr_t ce = s.end.load(std::memory_order_relaxed);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (s.seq.load(std::memory_order_relaxed) != seq)
            return 1;
        if (cs < end && start < ce)
            return 1;
    }
    return 0;
}

void Cache::free_change_log() noexcept
{
    delete[] change_log_.exchange(nullptr, std::memory_order_acq_rel);
}

}  // namespace vmt
