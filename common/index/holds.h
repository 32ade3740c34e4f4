// Who holds which registration, without a shared write on the hit path.
//
// A hit records "this thread holds registration #id once more" in a slot of the calling
// thread's own record (a cache line no other thread writes). A put by the same thread undoes
// it there. Whatever does not fit (no free slot, or a put from another thread than the get)
// goes to the registration's shared counter. The number of holds on a registration is the sum
// over all threads' slots plus its shared counter; only retiring a registration needs that sum.
//
// Ordering: a reader publishes its hold, then re-checks the cache's retire epoch (or, on the
// tree path, its sequence count). A retirer moves them, then calls reader_barrier()
// (membarrier: a full fence on every thread of the process), then sums the holds. Either the
// retirer sees the hold, or the reader sees the change and backs out. Readers pay a compiler
// barrier only. A grace period (below) gives the retirer the same where every other thread
// keeps calling into vmtrack, without the barrier. Where membarrier is missing from the start,
// readers on the tree path pay a real fence and the memo (whose path has no fence) is never
// filled.
#ifndef VMTRACK_COMMON_HOLDS_H
#define VMTRACK_COMMON_HOLDS_H

#include <atomic>
#include <cstddef>
#include <cstdint>

namespace vmt {

// ThreadSanitizer does not model membarrier, so it cannot see that a put's slot store
// happens before the retirer's sum (and the dereg after it). Under TSan only, the put
// releases and the sum acquires, which carries the same edge where TSan can see it; the
// product's build keeps relaxed stores (a plain mov either way on x86).
#if defined(__SANITIZE_THREAD__)
constexpr std::memory_order kHoldPutOrder = std::memory_order_release;
constexpr std::memory_order kHoldSumOrder = std::memory_order_acquire;
#else
constexpr std::memory_order kHoldPutOrder = std::memory_order_relaxed;
constexpr std::memory_order kHoldSumOrder = std::memory_order_relaxed;
#endif

constexpr unsigned kHoldSlots = 32;      // per thread; a power of two
constexpr unsigned kHoldProbe = 4;       // slots looked at per id
constexpr unsigned kFastStatCaches = 8;  // caches whose hits are counted per thread

struct alignas(64) ThreadRecord {
    // key | count, key = the registration's address; free when count is 0.
    std::atomic<uint64_t> slots[kHoldSlots];
    std::atomic<uint64_t> hits[kFastStatCaches];       // answered by the memo
    std::atomic<uint64_t> tree_hits[kFastStatCaches];  // answered by a walk of the index
    ThreadRecord *next = nullptr;        // in the list of all records; never unlinked
    std::atomic<bool> owned{false};      // a live thread uses it
    // The grace period this thread had seen when it last entered vmt_get's full path or made
    // a slow put (note_reader_progress): see grace_seen_by_all.
    std::atomic<uint64_t> grace_seen{0};
    // The latest of those periods that this thread noted while it held nothing (no slot in
    // use): it holds none of what was retired before that period began, and never will, so a
    // reclaim of such registrations need not read its slots (holds_in_threads_many).
    std::atomic<uint64_t> quiet_since{0};
};

// The calling thread's record (created on first use; nullptr only when out of memory).
ThreadRecord *thread_record_slow() noexcept;
extern __thread ThreadRecord *t_record __attribute__((tls_model("initial-exec")));
inline ThreadRecord *thread_record() noexcept
{
    ThreadRecord *r = t_record;
    return __builtin_expect(r != nullptr, 1) ? r : thread_record_slow();
}

// A hold is keyed by the registration's address, which is 8-byte aligned: the slot holds the
// address with the count (1..7) in its low bits. More holds of one registration by one thread
// take more slots (or the shared counter).
constexpr unsigned kCountBits = 3;
constexpr int32_t kMaxSlotCount = (1 << kCountBits) - 1;
using HoldKey = uint64_t;
inline HoldKey hold_key(const void *reg) { return (uint64_t)(uintptr_t)reg; }
inline HoldKey slot_id(uint64_t s) { return s & ~(uint64_t)kMaxSlotCount; }
inline int32_t slot_count(uint64_t s) { return (int32_t)(s & kMaxSlotCount); }
inline uint64_t make_slot(HoldKey id, int32_t count) { return id | (uint64_t)count; }
// Registrations are pool objects a few words apart, so the low bits of the address spread well.
inline unsigned slot_home(HoldKey id) { return (unsigned)(id >> kCountBits) & (kHoldSlots - 1); }

// Adds one hold of `id` to this thread's slots; false if no slot is free (use the shared
// counter then). A slot whose count is 0 is free, whatever key it still shows: that way a put
// only decrements. The home slot is tried first: that is the common case and stays cheap.
inline bool hold_add_probe(ThreadRecord *t, HoldKey id) noexcept
{
    unsigned h = slot_home(id);
    int free_at = -1;
    for (unsigned k = 0; k < kHoldProbe; k++) {
        unsigned i = (h + k) & (kHoldSlots - 1);
        uint64_t s = t->slots[i].load(std::memory_order_relaxed);
        if (slot_id(s) == id && slot_count(s) > 0 && slot_count(s) < kMaxSlotCount) {
            t->slots[i].store(s + 1, std::memory_order_relaxed);
            return true;
        }
        if (slot_count(s) == 0 && free_at < 0)
            free_at = (int)i;
    }
    if (free_at < 0)
        return false;
    t->slots[free_at].store(make_slot(id, 1), std::memory_order_relaxed);
    return true;
}

inline bool hold_add(ThreadRecord *t, HoldKey id) noexcept
{
    unsigned h = slot_home(id);
    uint64_t s = t->slots[h].load(std::memory_order_relaxed);
    if (__builtin_expect(slot_count(s) == 0, 1)) {
        t->slots[h].store(make_slot(id, 1), std::memory_order_relaxed);
        return true;
    }
    return hold_add_probe(t, id);
}

// Removes one hold of `id` from this thread's slots; false if this thread has none there.
inline bool hold_remove(ThreadRecord *t, HoldKey id) noexcept
{
    unsigned h = slot_home(id);
    for (unsigned k = 0; k < kHoldProbe; k++) {
        unsigned i = (h + k) & (kHoldSlots - 1);
        uint64_t s = t->slots[i].load(std::memory_order_relaxed);
        // One compare: the key matches and the count is at least 1.
        if (__builtin_expect(s - make_slot(id, 1) < (uint64_t)kMaxSlotCount, 1)) {
            t->slots[i].store(s - 1, kHoldPutOrder);
            return true;
        }
    }
    return false;
}

// Sum of all threads' slot holds of `id` (call after reader_barrier()).
int64_t holds_in_threads(HoldKey id) noexcept;
// The same for ids[0..n), into sums[0..n): each thread's slots are read once for all of them.
// A reclaim pass that asked per id read another thread's record, which that thread writes at
// each get and put, once per registration: the line moved between CPUs for each.
// quiet_bound: 0, or a grace period every one of the ids was retired before: threads quiet
// since then (ThreadRecord::quiet_since) are not read. Each read of a record that its thread
// keeps writing moves four lines to this CPU and back.
void holds_in_threads_many(const HoldKey *ids, int64_t *sums, size_t n,
                           uint64_t quiet_bound) noexcept;

// Whether readers must fence themselves (membarrier unavailable).
extern std::atomic<bool> g_readers_fence __attribute__((visibility("hidden")));

// A full memory barrier on every running thread of the process (a plain fence when no other
// thread owns a record): true if it had to interrupt other threads (membarrier).
bool reader_barrier() noexcept;
// Whether reader_barrier() would cost nothing but a fence: readers fence themselves, or no
// other thread owns a record now. A hint for batching; reader_barrier decides again.
bool reader_barrier_is_free() noexcept;
// reader_barrier() where it is only a fence (true), else nothing (false): one fence and one
// look at the records, for a caller that would otherwise ask reader_barrier_is_free() and
// then call reader_barrier(), which fence three times between them.
bool reader_barrier_if_free() noexcept;

// Grace periods: a cheaper proof than reader_barrier() for threads that keep calling vmtrack.
// A reclaimer starts one after it took its retirements (begin_grace_period: a seq_cst
// increment, after those retirements' stores); each thread publishes the latest it has seen
// where it enters vmt_get's full path or makes a slow put, never inside a hit's
// publish-and-check (note_reader_progress: a release store of an acquire load). Once every
// other owned record shows the period (grace_seen_by_all), each hold a thread published
// before its note is visible (the release), and each hit it began after it reads the moved
// sequence or epoch (the acquire), which is all reader_barrier() gives. A thread that calls
// nothing (or only hits while nothing is retired) never notes: the reclaimer falls back to the
// barrier then.
extern std::atomic<uint64_t> g_grace_period __attribute__((visibility("hidden")));
// note_reader_progress's store of a period it had not seen (and of quiet_since).
void note_new_period(ThreadRecord *t, uint64_t seen) noexcept;
inline void note_reader_progress(ThreadRecord *t) noexcept
{
    uint64_t seen = g_grace_period.load(std::memory_order_acquire);
    if (t->grace_seen.load(std::memory_order_relaxed) != seen)
        note_new_period(t, seen);
}
// The new period's number.
uint64_t begin_grace_period() noexcept;
// The oldest period any thread but the caller that owns a record has noted (UINT64_MAX if
// none): every period up to it has passed.
uint64_t grace_seen_by_all() noexcept;

// After fork in the child: only the calling thread exists; every other record is freed.
void holds_after_fork_child() noexcept;
void holds_lock_for_fork() noexcept;
void holds_unlock_after_fork_parent() noexcept;

// The caches of the process that hold a registration retired but not yet freed (plus one
// where readers fence themselves). While it is 0 a put needs nothing but its own thread's
// slot. Counted by cache, not by registration: every put reads this word, and a count that
// moved at every retirement and every free moved its line between the CPUs of two threads
// missing together at each miss (even on caches of their own), costing each put a transfer.
// A cache moves it twice a reclaim batch at most (its first retirement, its last free).
extern std::atomic<long> g_retiring_caches __attribute__((visibility("hidden")));

// Hits of all threads for fast-stat cache slot `slot`: memo hits, or tree hits.
uint64_t hits_in_threads(unsigned slot, bool tree) noexcept;
void hits_clear_slot(unsigned slot) noexcept;

}  // namespace vmt

#endif
