// Events: invalidation (from the tracker, or vmt_cache_invalidate), unmaps, pausing hits while
// a tracker reads its events, subscribers, and flush.
//
// Invariant: when an unmap (or any invalidation) of a range returns to its caller, no entry
// overlapping the range is in the index, and no miss that looked at the pages before can
// insert its registration afterwards. An unmap records itself in unmaps_ and in the
// invalidation log (inval_log_) under the index lock, at its start and again at its end; a
// miss inserts only if neither shows an overlap since its plan (miss.cc). An unmap of a range
// where nothing is cached, while no miss is in progress, skips the lock and the record: it
// only counts itself in quick_unmaps_, and a miss waits for that count to drop to 0 before it
// looks at the pages (Cache::MissInProgress), so the two cannot interleave. Subscribers hear
// of every unmap the locked path sees; inside pause_hits they hear of it at resume_hits, when
// the index lock is no longer held, so that they may call into vmtrack.
#include "config.h"
#include "cache/cache.h"

#include <pthread.h>

#include <cerrno>
#include <mutex>

#include "cache/internal.h"

namespace vmt {

namespace {
// Initial-exec, like t_record: every unmap the hooks see reads t_paused, and the default model
// in a shared library costs a __tls_get_addr call per use.
__thread Cache *t_paused __attribute__((tls_model("initial-exec"))) = nullptr;

// The end of [start, start+len), saturated at the top of the address space.
inline uintptr_t range_end(uintptr_t start, size_t len)
{
    return start + len < start ? UINTPTR_MAX : start + len;
}
}  // namespace

size_t Cache::invalidate_locked(uintptr_t start, uintptr_t end) noexcept
{
    log_invalidation(start, end);
    if (!index_overlaps(start, end))
        return 0;  // the common case: nothing cached there
    write_begin();
    size_t n = remove_overlapping(start, end, false);
    write_end();
    return n;
}

size_t Cache::remove_overlapping(uintptr_t start, uintptr_t end, bool touching) noexcept
{
    // The callers logged [start, end) or cover it with a new entry: what an entry has outside
    // it is logged here (remove_entry), so that misses planned with the entry start again.
    auto remove = [&](Entry *e, uintptr_t e_start, uintptr_t e_end) {
        if (e_start < start || e_end > end)
            remove_entry(e);
        else
            unindex_entry(e);
    };
    size_t n = 0;
    Entry *p = static_cast<Entry *>(index_.floor(start));
    if (p) {
        uintptr_t p_end = p->end.load(std::memory_order_relaxed);
        if (p_end > start || (touching && p_end == start)) {
            remove(p, p->start.load(std::memory_order_relaxed), p_end);
            n++;
        }
    }
    for (Entry *e = static_cast<Entry *>(index_.ceil_w(start)); e;
         e = static_cast<Entry *>(index_.ceil_w(start))) {
        uintptr_t e_start = e->start.load(std::memory_order_relaxed);
        if (e_start > end || (e_start == end && !touching))
            break;
        remove(e, e_start, e->end.load(std::memory_order_relaxed));
        n++;
    }
    return n;
}

void Cache::notify_subscribers(uintptr_t start, size_t len) noexcept
{
    if (!nsubs_)
        return;
    pthread_rwlock_rdlock(&subs_lock_);
    for (int i = 0; i < nsubs_; i++)
        subs_[i].fn(subs_[i].arg, reinterpret_cast<const void *>(start), len);
    pthread_rwlock_unlock(&subs_lock_);
}

void Cache::invalidate_lane(uintptr_t start, size_t len) noexcept
{
    if (!len)
        return;
    uintptr_t end = range_end(start, len);
    if (remember_mapped_)
        mapped_blocks_.forget(start, end);
    size_t n;
    if (t_paused == head_) {
        n = invalidate_locked(start, end);
    } else {
        std::lock_guard<SpinLock> g(lock_);
        n = invalidate_locked(start, end);
    }
    after_invalidation(n, start, len);
}

void Cache::after_invalidation(size_t removed, uintptr_t start, size_t len) noexcept
{
    if (removed)
        counts_.invalidations.fetch_add(removed, std::memory_order_relaxed);
    // Inside pause_hits the index lock is held: subscribers hear of it at resume_hits, so that
    // they may call into vmtrack. A full queue is delivered as it is (rare, and still correct).
    if (t_paused == head_ && nsubs_ && paused_events_count_ < kMaxPausedEvents) {
        paused_events_[paused_events_count_++] = Range{start, start + len, 0};
        return;
    }
    notify_subscribers(start, len);
}

bool Cache::index_overlaps(uintptr_t start, uintptr_t end) const noexcept
{
    // Cached ranges never overlap, so the one starting last before `end` overlaps
    // [start, end) if any does: one walk decides.
    const Entry *last = static_cast<const Entry *>(index_.floor(end - 1));
    return last && last->end.load(std::memory_order_relaxed) > start;
}

bool Cache::maybe_cached(uintptr_t start, uintptr_t end) const noexcept
{
    for (int spin = 0; spin < kHitSpins; spin++) {
        uint64_t s = seq_.load(std::memory_order_acquire);
        if (s & 1) {
            cpu_relax();
            continue;
        }
        bool overlaps = index_overlaps(start, end);
        std::atomic_thread_fence(std::memory_order_acquire);
        if (seq_.load(std::memory_order_relaxed) == s)
            return overlaps;
    }
    return true;  // no stable view of the index: take the locked path
}

uint64_t Cache::unmap_begin_lane(uintptr_t start, size_t len) noexcept
{
    if (!len)
        return kLockedUnmap;
    uintptr_t end = range_end(start, len);
    if (remember_mapped_)  // and again at unmap_end (mapped_blocks.h)
        mapped_blocks_.forget(start, end);
    // Subscribers hear of every unmap, and only the locked path tells them.
    if (!nsubs_ && t_paused != head_) {
        quick_unmaps_.fetch_add(1, std::memory_order_seq_cst);
        if (misses_active_.load(std::memory_order_seq_cst) == 0 && !maybe_cached(start, end))
            return kQuickUnmap;
        quick_unmaps_.fetch_sub(1, std::memory_order_seq_cst);
    }
    size_t n;
    {
        std::unique_lock<SpinLock> g(lock_);
        int found = -1;
        for (int i = 0; i < unmaps_count_; i++)
            if (unmaps_[i].start == start && unmaps_[i].end == end)
                found = i;
        if (found >= 0) {
            unmaps_[found].depth++;
        } else {
            while (unmaps_count_ == kMaxUnmapsInFlight)
                wait_for_unmaps(g);
            unmaps_[unmaps_count_++] = Range{start, end, 1};
        }
        n = invalidate_locked(start, end);
    }
    after_invalidation(n, start, len);
    return kLockedUnmap;
}

void Cache::unmap_end_lane(uintptr_t start, size_t len, uint64_t token) noexcept
{
    if (!len)
        return;
    if (remember_mapped_)  // a check between unmap_begin and the unmap may have marked it
        mapped_blocks_.forget(start, range_end(start, len));
    if (token == kQuickUnmap) {
        quick_unmaps_.fetch_sub(1, std::memory_order_seq_cst);
        return;
    }
    uintptr_t end = range_end(start, len);
    bool waiters;
    {
        std::lock_guard<SpinLock> g(lock_);
        waiters = unmap_waiters_ != 0;
        for (int i = 0; i < unmaps_count_; i++) {
            if (unmaps_[i].start == start && unmaps_[i].end == end) {
                if (--unmaps_[i].depth == 0)
                    unmaps_[i] = unmaps_[--unmaps_count_];
                break;
            }
        }
        // A registration that started during the unmap must not be inserted: log it again.
        log_invalidation(start, end);
    }
    if (waiters)  // most unmaps race nothing: no futex call for them
        unmap_done_.notify_all();
}

void Cache::wait_for_unmaps(std::unique_lock<SpinLock> &g) noexcept
{
    unmap_waiters_++;
    unmap_done_.wait(g);
    unmap_waiters_--;
}

void Cache::pause_lane() noexcept
{
    lock_.lock();
    t_paused = head_;
    write_begin();  // stops hits through the tree
    // ...and through the memo: the event being read may be for a range a memo slot holds.
    move_epoch();
}

void Cache::resume_lane() noexcept
{
    write_end();
    t_paused = nullptr;
    Range events[kMaxPausedEvents];
    int n = paused_events_count_;
    for (int i = 0; i < n; i++)
        events[i] = paused_events_[i];
    paused_events_count_ = 0;
    lock_.unlock();
    for (int i = 0; i < n; i++)
        notify_subscribers(events[i].start, events[i].end - events[i].start);
}

void Cache::flush_lane() noexcept
{
    maybe_after_fork();
    {
        std::lock_guard<SpinLock> g(lock_);
        if (lru_head_) {
            write_begin();
            while (lru_head_)
                remove_entry(lru_head_);
            write_end();
        }
    }
    reclaim_settled();
}

int Cache::subscribe(vmt_event_fn fn, void *arg)
{
    if (!fn)
        return -EINVAL;
    pthread_rwlock_wrlock(&subs_lock_);
    int rc = 0;
    for (int i = 0; i < nsubs_; i++)
        if (subs_[i].fn == fn && subs_[i].arg == arg)
            rc = -EEXIST;
    if (!rc && nsubs_ == kMaxSubscribers)
        rc = -ENOSPC;
    if (!rc)
        subs_[nsubs_++] = Sub{fn, arg};
    pthread_rwlock_unlock(&subs_lock_);
    return rc;
}

int Cache::unsubscribe(vmt_event_fn fn, void *arg)
{
    pthread_rwlock_wrlock(&subs_lock_);
    int rc = -ENOENT;
    for (int i = 0; i < nsubs_; i++)
        if (subs_[i].fn == fn && subs_[i].arg == arg) {
            subs_[i] = subs_[--nsubs_];
            rc = 0;
            break;
        }
    pthread_rwlock_unlock(&subs_lock_);
    return rc;
}

}  // namespace vmt
