// fork(): the parent's caches stay as they were; the child's start empty.
//
// Invariant: a child never deregisters, reuses or hits a registration of its parent (the
// registrations belong to the parent's devices, which the child did not inherit). The handlers
// take every cache's index lock around fork() so that the child copies consistent state; in
// the child every lock, pool, index, memo slot, list and counter starts again from zero (the
// counters are one struct, Cache::Counters, reset as a whole so that none is forgotten), the
// devices are marked as the parent's, and the tracker is asked to follow the child at the
// child's first call (maybe_after_fork), outside the index lock.
#include "config.h"
#include "cache/cache.h"

#include <pthread.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <cstring>
#include <new>

#include "cache/internal.h"
#include "util/log.h"

namespace vmt {

std::mutex g_caches_lock;
Cache *g_caches_list = nullptr;

namespace {
pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;
void fork_prepare() { Cache::prepare_fork(); }
void fork_parent() { Cache::parent_after_fork(); }
void fork_child() { Cache::child_after_fork(); }
void install_atfork() { pthread_atfork(fork_prepare, fork_parent, fork_child); }
}  // namespace

void install_fork_handlers() noexcept
{
    pthread_once(&g_atfork_once, install_atfork);
}

void Cache::prepare_fork() noexcept
{
    g_caches_lock.lock();
    for (Cache *c = g_caches_list; c; c = c->next_cache_)
        c->lock_.lock();
    holds_lock_for_fork();
}

void Cache::parent_after_fork() noexcept
{
    holds_unlock_after_fork_parent();
    for (Cache *c = g_caches_list; c; c = c->next_cache_)
        c->lock_.unlock();
    g_caches_lock.unlock();
}

void Cache::child_after_fork() noexcept
{
    holds_after_fork_child();
    for (Cache *c = g_caches_list; c; c = c->next_cache_) {
        // The parent's registrations belong to the parent: forget them without deregistering
        // (their objects stay allocated and are never reused here). lock_ was taken by this
        // thread in prepare_fork: unlocked (TSan sees that); the locks other threads may
        // have held are rebuilt, those threads are not here.
        c->lock_.unlock();
        new (&c->reclaim_lock_) SpinLock();
        // A thread of the parent may have been in a subscriber's callback, holding this
        // for reading: that thread is not here.
        pthread_rwlock_t unlocked = PTHREAD_RWLOCK_INITIALIZER;
        memcpy(static_cast<void *>(&c->subs_lock_), &unlocked, sizeof unlocked);
        new (&c->fork_fixup_lock_) std::mutex();
        c->write_depth_ = 0;
        new (&c->unmap_done_) FutexEvent();
        c->unmap_waiters_ = 0;  // the waiting threads were not copied
        c->quick_unmaps_.store(0);  // nor were the unmapping ones
        c->misses_active_.store(0);
        c->index_.reset_after_fork();  // the pools were consistent: lock_ was held
        // Dropped, not cleared: zero pages come back as they are touched. A cache of eight
        // lanes wrote (and so faulted in) 16 MiB in every child, most of it never used. By
        // the system call itself: a patched madvise (Open MPI's patcher, vmtrack's hooks)
        // invalidates, which takes the locks of the caches this loop has not reached yet.
        if (syscall(SYS_madvise, c->memo_, kMemoSlots * sizeof(MemoSlot), MADV_DONTNEED) != 0)
            memset(static_cast<void *>(c->memo_), 0, kMemoSlots * sizeof(MemoSlot));
        c->memo_populated_.store(false);
        c->clear_live_sets();
        c->seq_.store(0);
        c->lru_head_ = c->lru_tail_ = nullptr;
        c->entry_count_ = 0;
        c->bytes_cached_ = 0;
        c->published_entries_ = c->published_bytes_ = 0;
        c->lane_entries_.store(0);
        c->lane_bytes_.store(0);
        c->lane_totals_.entries.store(0);
        c->lane_totals_.bytes.store(0);
        c->limbo_ = nullptr;
        c->limbo_nonempty_.store(false);
        c->limbo_new_.store(0);
        c->limbo_new_bytes_.store(0);
        c->limbo_total_.store(0);
        c->limbo_urgent_.store(0);
        for (WaitingBatch &w : c->waiting_)
            c->take_batch(w);
        c->unmaps_count_ = 0;
        c->inval_count_.store(0);
        c->mapped_blocks_.forget_all();  // MADV_DONTFORK ranges are not in the child
        for (Device *d = c->devices_; d; d = d->next) {
            d->forked_away = true;
            d->memo_tag.store(kNoMemo);
        }
        new (&c->counts_) Counters();  // every counter, whichever were added
        c->needs_fork_fixup_.store(true);
    }
    g_caches_lock.unlock();
}

void Cache::maybe_after_fork() noexcept
{
    if (!needs_fork_fixup_.load(std::memory_order_acquire))
        return;
    if (head_ != this) {  // a lane: the tracker is the head's, and follows the child once
        head_->maybe_after_fork();
        std::lock_guard<std::mutex> g(fork_fixup_lock_);
        words_ = head_->words_;
        caching_ = head_->caching_;
        needs_fork_fixup_.store(false, std::memory_order_release);
        return;
    }
    // Not lock_: the tracker may unmap the parent's state, which comes back here as an event.
    std::lock_guard<std::mutex> g(fork_fixup_lock_);
    if (!needs_fork_fixup_.load())
        return;
    int rc = tracker_->after_fork_child();
    if (rc < 0) {
        VMT_LOG_ERROR("after fork: tracker %s cannot follow the child (%s): caching is off",
                      tracker_->name(), strerror(-rc));
        caching_ = false;
        std::lock_guard<SpinLock> l(lock_);
        for (Device *d = devices_; d; d = d->next)
            d->memo_tag.store(kNoMemo);
    }
    words_ = tracker_->words();
    needs_fork_fixup_.store(false, std::memory_order_release);
}

}  // namespace vmt
