// Who holds which registration, without a shared write on the hit path.
//
// A hit records "this thread holds registration #id once more" in a slot of the calling
// thread's own record (a cache line no other thread writes). A put by the same thread undoes
// it there. Whatever does not fit (no free slot, or a put from another thread than the get)
// goes to the registration's shared counter. The number of holds on a registration is the sum
// over all threads' slots plus its shared counter; only retiring a registration needs that sum.
//
// Ordering: a reader publishes its hold, then re-checks the cache's sequence count. A retirer
// changes the sequence count, then calls reader_barrier() (membarrier: a full fence on every
// thread of the process), then sums the holds. Either the retirer sees the hold, or the reader
// sees the new sequence count and backs out. Readers pay a compiler barrier only; where
// membarrier is missing they pay a real fence.
#ifndef VMTRACK_COMMON_HOLDS_H
#define VMTRACK_COMMON_HOLDS_H

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace vmt {

constexpr unsigned kHoldSlots = 32;      // per thread; a power of two
constexpr unsigned kHoldProbe = 4;       // slots looked at per id
constexpr unsigned kFastStatCaches = 8;  // caches whose hits are counted per thread

struct alignas(64) ThreadRecord {
    // (id << 32) | (uint32_t)count; 0 is an empty slot (ids start at 1).
    std::atomic<uint64_t> slots[kHoldSlots];
    std::atomic<uint64_t> hits[kFastStatCaches];
    ThreadRecord *next = nullptr;        // in the list of all records; never unlinked
    std::atomic<bool> owned{false};      // a live thread uses it
};

// The calling thread's record (created on first use; nullptr only when out of memory).
ThreadRecord *thread_record() noexcept;

inline uint32_t slot_id(uint64_t s) { return (uint32_t)(s >> 32); }
inline int32_t slot_count(uint64_t s) { return (int32_t)(uint32_t)s; }
inline uint64_t make_slot(uint32_t id, int32_t count) { return ((uint64_t)id << 32) | (uint32_t)count; }
inline unsigned slot_home(uint32_t id) { return (id * 2654435761u) >> 27; }  // top 5 bits: 0..31

// Adds one hold of `id` to this thread's slots; false if no slot is free (use the shared
// counter then).
inline bool hold_add(ThreadRecord *t, uint32_t id) noexcept
{
    unsigned h = slot_home(id);
    int free_at = -1;
    for (unsigned k = 0; k < kHoldProbe; k++) {
        unsigned i = (h + k) & (kHoldSlots - 1);
        uint64_t s = t->slots[i].load(std::memory_order_relaxed);
        if (slot_id(s) == id) {
            t->slots[i].store(make_slot(id, slot_count(s) + 1), std::memory_order_relaxed);
            return true;
        }
        if (s == 0 && free_at < 0)
            free_at = (int)i;
    }
    if (free_at < 0)
        return false;
    t->slots[free_at].store(make_slot(id, 1), std::memory_order_relaxed);
    return true;
}

// Removes one hold of `id` from this thread's slots; false if this thread has none there.
inline bool hold_remove(ThreadRecord *t, uint32_t id) noexcept
{
    unsigned h = slot_home(id);
    for (unsigned k = 0; k < kHoldProbe; k++) {
        unsigned i = (h + k) & (kHoldSlots - 1);
        uint64_t s = t->slots[i].load(std::memory_order_relaxed);
        if (slot_id(s) == id && slot_count(s) > 0) {
            int32_t c = slot_count(s) - 1;
            t->slots[i].store(c ? make_slot(id, c) : 0, std::memory_order_relaxed);
            return true;
        }
    }
    return false;
}

// Sum of all threads' slot holds of `id` (call after reader_barrier()).
int64_t holds_in_threads(uint32_t id) noexcept;

// Whether readers must fence themselves (membarrier unavailable).
extern std::atomic<bool> g_readers_fence;

// A full memory barrier on every running thread of the process.
void reader_barrier() noexcept;

// After fork in the child: only the calling thread exists; every other record is freed.
void holds_after_fork_child() noexcept;
void holds_lock_for_fork() noexcept;
void holds_unlock_after_fork_parent() noexcept;

// A fresh, never reused registration id.
uint32_t new_reg_id() noexcept;

// Hits of all threads for fast-stat cache slot `slot`.
uint64_t hits_in_threads(unsigned slot) noexcept;
void hits_clear_slot(unsigned slot) noexcept;

}  // namespace vmt

#endif
