// Eviction: the LRU list of entries and the limits (entries, bytes, a device's regions and
// bytes).
//
// Invariant: eviction only retires (remove_entry), under the index lock inside a write
// section, like any other removal; it never deregisters, so a held registration stays valid
// until its holder puts it (retire.cc). An entry found recently used gets a second chance at
// the head instead; `keep` (the entry a miss is filling) is never evicted, and every walk is
// bounded (twice the entries), so eviction ends even when nothing can go.
#include "config.h"
#include "cache/cache.h"

#include <mutex>

#include "cache/internal.h"

namespace vmt {

// The list is a ring (the tail's next is the head): a second chance moves the oldest entry
// to the head by moving the two ends, and writes no entry's links. Relinking it wrote its
// neighbour and the old head, at every entry an eviction passed over (random gets through a
// cache at its limit pass over 1-2 a miss).
void Cache::lru_push_head(Entry *e) noexcept
{
    if (!lru_head_) {
        e->lru_prev = e->lru_next = e;
        lru_head_ = lru_tail_ = e;
        return;
    }
    e->lru_next = lru_head_;
    e->lru_prev = lru_tail_;
    lru_head_->lru_prev = e;
    lru_tail_->lru_next = e;
    lru_head_ = e;
}

void Cache::lru_unlink(Entry *e) noexcept
{
    if (e->lru_next == e) {
        lru_head_ = lru_tail_ = nullptr;
    } else {
        e->lru_prev->lru_next = e->lru_next;
        e->lru_next->lru_prev = e->lru_prev;
        if (lru_head_ == e)
            lru_head_ = e->lru_next;
        if (lru_tail_ == e)
            lru_tail_ = e->lru_prev;
    }
    e->lru_prev = e->lru_next = nullptr;
}

void Cache::lru_second_chance() noexcept
{
    lru_head_ = lru_tail_;
    lru_tail_ = lru_tail_->lru_prev;
}

bool Cache::evict_for_insert(Entry *keep) noexcept
{
    // A lane within its share leaves the eviction to the lanes past theirs (after the lock:
    // steal_one), so that a thread's lane is not emptied by another thread's misses.
    if (totals_ && !over_share())
        return false;
    evict_past_limits(keep);
    return true;
}

void Cache::evict_past_limits(Entry *keep) noexcept
{
    // The batch's bytes are still pinned: with them the cache must stay within max_bytes, or
    // they go at once like any other retirement.
    retire_may_wait_ = bytes_cached_ <= max_bytes_;
    evict_locked(nullptr, keep, 0);
    retire_may_wait_ = false;
    size_t pinned = limbo_new_bytes_.load(std::memory_order_relaxed) +
                    waiting_bytes_.load(std::memory_order_relaxed);
    if (bytes_cached_ + pinned > max_bytes_ && limbo_new_.load(std::memory_order_relaxed) != 0)
        add_under_lock(limbo_urgent_, size_t{1});
}

bool Cache::evict_soft_locked(Device *dev, Entry *keep, size_t adding_bytes) noexcept
{
    retire_may_wait_ = dev->soft_batch > 1;
    size_t evicted = evict_locked(dev, keep, 0, adding_bytes);
    retire_may_wait_ = false;
    if (evicted == 0 || dev->regions_leaving < dev->soft_batch)
        return false;
    if (dev->soft_batch > 1)  // else retire() marked it urgent
        add_under_lock(limbo_urgent_, size_t{1});
    return true;
}

size_t Cache::evict_locked(Device *for_dev, Entry *keep, size_t want, size_t adding_bytes) noexcept
{
    size_t evicted = 0;
    // The device's registrations retired here: its counts drop only when they are
    // deregistered (reclaim), but they are on their way out and make room already.
    DeviceLeaving dev_leaving;
    size_t budget = 2 * entry_count_ + 2;
    while (lru_tail_ && budget--) {
        bool need = evicted < want || over_limits(nullptr, 0) ||
                    (for_dev && device_full(for_dev, dev_leaving, adding_bytes));
        if (!need)
            break;
        Entry *e = lru_tail_;
        bool has_dev = !for_dev;
        for (Reg *r = e->regs.load(std::memory_order_relaxed); r && !has_dev; r = r->next.load(std::memory_order_relaxed))
            has_dev = r->dev.load(std::memory_order_relaxed) == for_dev;
        bool recently_used = e->used.load(std::memory_order_relaxed) != 0;
        if (e == keep || recently_used || (!has_dev && !over_limits(nullptr, 0))) {
            // Second chance: it was used since it last reached the head.
            e->used.store(0, std::memory_order_relaxed);
            lru_second_chance();
            continue;
        }
        remove_entry(e);
        add_under_lock(counts_.evictions, uint64_t{1});
        evicted++;
        if (for_dev && has_dev) {  // an entry has at most one registration per device
            dev_leaving.regions++;
            dev_leaving.bytes += e->end.load(std::memory_order_relaxed) -
                                 e->start.load(std::memory_order_relaxed);
        }
    }
    return evicted;
}

}  // namespace vmt
