// The registration cache: an index of non-overlapping address ranges (entries), each holding
// one registration per device that asked for it.
//
// Locks: `lock_` (the index lock) serialises every change of the index, of entries and of
// registrations' states; it is never held across a device call, a tracker call that may block,
// malloc or anything that can unmap memory, so its sections are short and it is a SpinLock. Hits take no lock: they read the index inside a
// sequence-count section (`seq_` odd while a writer changes the index) and record their hold
// in the calling thread's own record (holds.h).
//
// Life of a registration: LIVE in an entry -> RETIRED (removed from its entry by invalidation,
// eviction, upgrade, merge, flush or detach; moved to `limbo_`) -> deregistered and freed by
// reclaim() once no thread holds it. reclaim() runs outside the index lock, never in a hook.
//
// One file per concern, each under the invariant it keeps: lifecycle.cc (create, destroy,
// attach, detach), hit.cc (vmt_get, vmt_put, memo, tree hit), miss.cc, retire.cc (retire,
// reclaim, the slow put), evict.cc, events.cc (invalidation, unmaps, subscribers, flush),
// lanes.cc (a cache of several indexes, one per group of threads), fork.cc, stats.cc;
// internal.h has what they share.
#ifndef VMTRACK_COMMON_CACHE_H
#define VMTRACK_COMMON_CACHE_H

#include <algorithm>
#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <mutex>
#include <string>

#include <pthread.h>

#include "index/holds.h"
#include "index/index.h"
#include "index/pool.h"
#include "cache/mapped_blocks.h"
#include "trackers/tracker.h"
#include "util/spin_lock.h"
#include "vmtrack.h"

namespace vmt {

class Cache;
struct Entry;

// A memo tag is (page number | device tag): page numbers of 57-bit addresses fit below bit
// 48, and a cache numbers its devices 1..kMaxMemoDevices in the bits above.
constexpr uint64_t kNoMemo = ~0ull;
constexpr unsigned kMemoTagShift = 48;
constexpr uint64_t kMaxMemoDevices = (1ull << (64 - kMemoTagShift)) - 2;
constexpr uint64_t kMemoSlotsOverflow = ~0ull;

// Lanes (lanes.cc): a cache made of up to kMaxLanes indexes, each with its own lock, LRU list,
// pools, memo and counts, so that threads missing on different memory do not share the lines
// a miss writes. Memory is divided into granules of 64 MiB (the size of glibc's per-thread
// heaps); the first thread that looks one up gives it to its home lane, for good.
constexpr unsigned kMaxLanes = 8;
constexpr unsigned kGranuleShift = 26;
constexpr uintptr_t kGranules = uintptr_t{1} << (47 - kGranuleShift);  // user space: 47 bits

struct Device {
    // What every vmt_get reads, written only at attach, detach and fork: a cache line of its
    // own. The counters below, which each miss and each reclaim write under the lock, shared
    // it before, and two threads, one missing and one hitting (or both missing), then moved
    // the line between their CPUs at every get.
    alignas(64) Cache *cache = nullptr;
    // This device's part of a memo tag (memo_tag_of). kNoMemo sends every vmt_get of the
    // device to the full path: detached, attached in the parent of a fork, or a cache that
    // caches nothing. It is the one load the hit path needs to know all of that.
    std::atomic<uint64_t> memo_tag{kNoMemo};
    void *memo = nullptr;        // the cache's memo, one load closer to the hit path
    const std::atomic<uint64_t> *memo_live = nullptr;  // the cache's memo_live_, likewise
    std::atomic<bool> detached{false};
    bool forked_away = false;    // attached in the parent of a fork()
    bool check_words = false;    // the cache's tracker has validity words (kmod)
    // Has twins in the cache's other lanes (lane_devs): written before the device is handed
    // out; here, on the line every get reads, not beside lane_devs (a line more a miss).
    bool laned = false;
    uint32_t hits_offset = 0;    // of the cache's hit counter in a ThreadRecord
    // A device with twins in the cache's other lanes (laned, below), once a lane other than
    // the head's owns memory: the cache's granule owners (0: nobody yet, else the lane's
    // number + 1). Until then (a process whose one thread uses the cache, all of it lane
    // 0's) and for other devices, nullptr: the hit pays one test for lanes.
    std::atomic<const std::atomic<uint8_t> *> lane_owner{nullptr};
    struct vmt_device_ops ops {};
    void *ctx = nullptr;
    alignas(64) size_t regions = 0;  // registrations alive (incl. retired, not yet deregistered)
    size_t bytes = 0;
    // Of those, retired ones of a device with soft limits (VMT_DEVICE_SOFT_LIMITS): gone from
    // the cache, so they make room under its limits already while they wait to be
    // deregistered (a grace period, in a threaded process).
    size_t regions_leaving = 0;
    size_t bytes_leaving = 0;
    // A soft limit's evictions wait until this many of the device's are leaving, then go
    // together (Cache::evict_soft_locked); 1: each at once.
    size_t soft_batch = 1;
    int attach_count = 0;        // under the cache's lock_
    std::string name;
    Device *next = nullptr;
    // Where it has no limits of its own, a device of a cache with lanes has a twin in each
    // (lane_devs[0] is itself); a twin, a device with limits or of a cache of one lane has
    // none, and all its gets go to its own cache.
    Device *lane_devs[kMaxLanes] = {};
};

// The device of the lane that owns addr's granule: d where d is not laned, or the granule is
// nobody's yet (the full path gives it to the caller's lane: Cache::claim_granule).
inline Device *lane_device(Device *d, uintptr_t addr) noexcept
{
    const std::atomic<uint8_t> *owners = d->lane_owner.load(std::memory_order_relaxed);
    if (!owners)
        return d;
    uintptr_t g = addr >> kGranuleShift;
    unsigned owner = g < kGranules ? owners[g].load(std::memory_order_relaxed) : 0;
    return owner > 1 ? d->lane_devs[owner - 1] : d;
}

enum RegState : uint32_t {
    kRegLive = 0,      // in its entry's list, findable by hits
    kRegRetired = 1,   // out of the index; deregistered once nobody holds it
    kRegUncached = 2,  // never cached: deregistered at the last put (shared counter only)
    kRegDead = 3,      // deregistered; memory waits for the last stray hold
};

// The first member of Reg and Entry is pointer-sized and atomic: the pool keeps its free
// link there (pool.h).
struct Reg {
    std::atomic<Entry *> entry{nullptr};
    std::atomic<Device *> dev{nullptr};
    std::atomic<void *> handle{nullptr};
    std::atomic<Reg *> next{nullptr};          // in the entry's list; in limbo_ once retired
    std::atomic<uint32_t> bits{0};             // access | state << 8 | deferred flag
    std::atomic<int32_t> shared_holds{0};
};
// Holds keep their count in the low three bits of the registration's address (holds.h).
static_assert(alignof(Reg) >= 8 && sizeof(Reg) % 8 == 0, "registrations are 8-byte aligned");

constexpr uint32_t kBitsAccess = 0xff;
constexpr uint32_t kBitsDeferred = 1u << 16;
inline unsigned reg_access(const Reg *r) { return r->bits.load(std::memory_order_relaxed) & kBitsAccess; }
inline uint32_t reg_state(const Reg *r) { return (r->bits.load(std::memory_order_acquire) >> 8) & 0xff; }
inline void reg_set_state(Reg *r, uint32_t state)
{
    uint32_t b = r->bits.load(std::memory_order_relaxed);
    r->bits.store((b & ~(0xffu << 8)) | state << 8, std::memory_order_release);
}

struct alignas(64) Entry {
    std::atomic<uintptr_t> start{0};
    std::atomic<uintptr_t> end{0};
    std::atomic<Reg *> regs{nullptr};
    std::atomic<uint32_t> watch_handle{0};
    std::atomic<uint32_t> watch_expect{0};
    // The memo slots filled with this entry: four lanes of (slot index + 1), 0 free, or
    // kMemoSlotsOverflow when a fifth was filled (Cache::forget_memo_of).
    std::atomic<uint64_t> memo_slots{0};
    // Writer-only below (index lock).
    // Registrations of this entry not yet freed: at most 65535 (insert_plan serves a get
    // uncached rather than add one more), so that the index's hint fits beside it.
    uint16_t regs_alive = 0;
    LeafHint leaf{};                     // the index's (RangeIndex::erase_hinted)
    // Changed only inside a write section, read only under the lock: plain loads and
    // stores (an assignment was seq_cst, an exchange, two in every evicting miss).
    std::atomic<bool> in_index{false};
    bool watched = false;
    // Hit since it last reached the LRU head (sampled on the memo path): its second chance. A
    // flag, set only while clear, rather than the tick of the last hit: the tick moved with
    // every insert, so a thread hitting while another missed read a line the other wrote at
    // each miss, and wrote the entry again after each (a third of its hit time). A byte, so
    // that an entry is one cache line (64 bytes) and 10^6 of them cost 8 MB less.
    std::atomic<uint8_t> used{0};
    Entry *lru_prev = nullptr, *lru_next = nullptr;
};
static_assert(sizeof(Entry) == 64 && alignof(Entry) == 64, "an entry is one cache line");
constexpr uint16_t kMaxRegsAlive = UINT16_MAX;
// The most of a soft-limited device's evictions that wait for each other (Device::soft_batch,
// lifecycle.cc), and so the most a reclaim in a miss's lock turn takes (TakenLimbo).
constexpr size_t kSoftBatchMax = 16;

// vmt_get's, vmt_get_handle's and vmt_get_memo's common path (hit.cc, the only place that
// uses it); kMemoOnly: vmt_get_memo, which answers -EAGAIN where the others look further.
template <bool kMemoOnly = false, bool kRouted = false>
inline int get_inline(struct vmt_device *dev, const void *addr, size_t len, unsigned access,
                      struct vmt_reg **out, void **handle);

class Cache final : public TrackerSink {
    // The hit path is flattened into vmt_get (hit.cc: get_inline), which reads the fields
    // below.
    template <bool kMemoOnly, bool kRouted>
    friend int get_inline(struct vmt_device *dev, const void *addr, size_t len, unsigned access,
                          struct vmt_reg **out, void **handle);

public:
    static int create(const struct vmt_cache_opts *opts, bool merge, Cache **out);
    ~Cache();

    int attach(const struct vmt_device_ops *ops, void *ctx, Device **out);
    void detach(Device *dev);
    int get(Device *dev, const void *addr, size_t len, unsigned access, Reg **out);
    // hold_released: the fast path (vmt_put) already took the hold out of this thread's slots.
    void put(Reg *reg, bool hold_released);
    int invalidate_manual(uintptr_t start, size_t len);
    int flush();
    // One registration out of the cache, one device's unused registrations (maintain.cc).
    int invalidate_reg(Reg *r);
    int flush_device(Device *dev);
    void stats(struct vmt_stats *s);
    int subscribe(vmt_event_fn fn, void *arg);
    int unsubscribe(vmt_event_fn fn, void *arg);
    const char *tracker_name() const noexcept { return tracker_->name(); }
    const std::string &tracker_report() const noexcept { return tracker_report_; }
    std::string tracker_details() const { return tracker_->describe(); }

    // The changes the tracker reported before they happened (changes.cc; the head's):
    // -ENOTSUP where the tracker does not hear every change first.
    int changes_mark(uint64_t *mark) noexcept;
    // 0: no change overlapping [start, start+len) since mark; 1: one, or it cannot tell.
    int changed_since(uint64_t mark, uintptr_t start, size_t len) const noexcept;

    // TrackerSink: the head's, for all its lanes (lanes.cc).
    void invalidate(uintptr_t start, size_t len) noexcept override;
    uint64_t unmap_begin(uintptr_t start, size_t len) noexcept override;
    void unmap_end(uintptr_t start, size_t len, uint64_t token) noexcept override;
    void pause_hits() noexcept override;
    void resume_hits() noexcept override;
    void reap() noexcept override;

    // fork() handlers for every cache (holds.cc has the thread side).
    static void prepare_fork() noexcept;
    static void parent_after_fork() noexcept;
    static void child_after_fork() noexcept;

private:
    Cache() = default;

    // A miss (miss.cc) plans under the lock what to register: the request, the entry it
    // upgrades (base), or the union of the request and the entries it touches; registers it
    // without the lock; and inserts it under the lock if nothing invalidated the range since
    // `mark`.
    struct Plan {
        uintptr_t start, end;
        unsigned access;         // with the rights the device had on what the range replaces
        Entry *base;             // the entry the registration joins, or nullptr for a new one
        uint64_t mark;           // inval_count_ when planned
        WatchToken watch;        // a new entry's watch (register_plan)
        void *handle;            // the device's registration (register_plan)
        bool union_known_mapped; // all the union adds to the request is cached and valid
        bool touches_nothing;    // merging, the union absorbed nothing (it is the request)
        uint64_t index_seq;      // seq_ when planned: unchanged, the index is as planned
        bool count_miss;         // planned without the lock: the insert counts the miss
        const void *leaf = nullptr;  // the index leaf where the failed hit's walk ended
    };
    // What a failed walk of the tree saw of the request's neighbours: the entries with the
    // greatest start <= it and the smallest start > it, at sequence count seq. The miss that
    // follows uses them instead of walking again while seq_ has not moved (no writer ran).
    struct WalkHint {
        uint64_t seq = 0;
        Entry *below = nullptr, *above = nullptr;
        bool valid = false;
        const void *leaf = nullptr;  // where the walk ended (RangeIndex::insert_at_walked)
    };
    int miss(Device *dev, uintptr_t a0, uintptr_t a1, unsigned access, Reg **out,
             const WalkHint *hint);
    // Takes the lock. true: another thread registered the range meanwhile (hold taken, *out).
    // first: the miss's first plan, which counts it.
    bool plan_miss(Device *dev, uintptr_t a0, uintptr_t a1, unsigned access, bool allow_merge,
                   bool first, ThreadRecord *t, Plan *plan, Reg **out,
                   const WalkHint *hint) noexcept;
    // below, above: the entries with the greatest start <= the request's and the smallest
    // start > it (or nullptr).
    void plan_union(Device *dev, Entry *below, Entry *above, Plan *plan) noexcept;
    // plan_miss's look at the index (the lock held): true as plan_miss.
    bool plan_locked(Device *dev, uintptr_t a0, uintptr_t a1, unsigned access, bool allow_merge,
                     ThreadRecord *t, Plan *plan, Reg **out, const WalkHint *hint) noexcept;
    // plan_miss without the lock, for the common fresh miss: true (*plan set) where the failed
    // walk's view of the index still holds and the request neither overlaps nor touches a
    // cached range, of a device without limits of its own.
    bool plan_without_lock(Device *dev, uintptr_t a0, uintptr_t a1, unsigned access, bool first,
                           const WalkHint *hint, Plan *plan) noexcept;
    void count_miss_locked(const Plan &plan) noexcept;  // where plan_without_lock left it
    int register_plan(Device *dev, uintptr_t a0, uintptr_t a1, Plan *plan, bool *may_evict) noexcept;
    int insert_plan(Device *dev, uintptr_t a0, uintptr_t a1, const Plan &plan, bool allow_merge,
                    ThreadRecord *t, Reg **out) noexcept;
    bool plan_still_valid(const Plan &plan) const noexcept;
    // Under the lock: `below` (the entry with the greatest start <= a request's), if it covers
    // the request up to a1 and its pages did not change since it was watched, else nullptr.
    Entry *covering_unchanged(Entry *below, uintptr_t a1) const noexcept;
    // Under the lock: dev's registration of e (an entry has at most one per device: an
    // upgrade retires the one it replaces), or nullptr.
    static Reg *device_reg_of(const Entry *e, const Device *dev) noexcept;
    // Under the lock: dev's registration of a cached range covering [a0, a1) with `access`,
    // whose pages did not change since it was watched, or nullptr.
    Reg *registered_meanwhile(Device *dev, uintptr_t a0, uintptr_t a1,
                              unsigned access) const noexcept;
    // insert_plan's way out without an insert: the registration and entry it took from the
    // pools go back, `instead` (if any) is held for the caller under the lock, and after g's
    // unlock the device's registration and the plan's watch are given back.
    void give_back_plan(Device *dev, const Plan &plan, Reg *r, Entry *ne, Reg *instead,
                        ThreadRecord *t, std::unique_lock<SpinLock> &g) noexcept;
    // insert_plan where the index had no room for the new entry's nodes: r is served
    // uncached (held once by the caller, its watch given back after g's unlock), and what
    // the device's soft limit evicted meanwhile is reclaimed.
    void serve_unindexed(Reg *r, Entry *ne, const Plan &plan, bool device_evicted,
                         std::unique_lock<SpinLock> &g) noexcept;
    void join_entry(Device *dev, Entry *base, Reg *r) noexcept;
    bool insert_entry(Entry *ne, Reg *r, const Plan &plan, bool allow_merge,
                      bool index_as_planned) noexcept;
    // dev->ops.reg; if the device is out of room and *may_evict, evicts one entry of the
    // device (never `keep`) and tries once more (and clears *may_evict).
    int reg_evicting(Device *dev, uintptr_t a0, uintptr_t a1, unsigned access, Entry *keep,
                     bool *may_evict, void **handle) noexcept;
    int get_uncached(Device *dev, uintptr_t a0, uintptr_t a1, unsigned access, Reg **out);
    // A hit through the tree; where there is none, *hint (if given) says what the walk saw.
    bool hit(Device *dev, uintptr_t addr, uintptr_t end, unsigned access, ThreadRecord *t, Reg **out,
             WalkHint *hint = nullptr) noexcept;
    void take_hold(ThreadRecord *t, Reg *r) noexcept;

    // Under lock_:
    // Write sections nest (pause_hits + invalidate); only the outermost moves seq_.
    void write_begin() noexcept
    {
        if (write_depth_++ == 0)
            seq_.fetch_add(1, std::memory_order_seq_cst);  // seq_cst: see memo_fill
    }
    void write_end() noexcept
    {
        // Only writers move seq_, under lock_: a store, not a locked add (a miss's insert and
        // every eviction end a section).
        if (--write_depth_ == 0) {
            seq_.store(seq_.load(std::memory_order_relaxed) + 1, std::memory_order_release);
            if (totals_ && (entry_count_ != published_entries_ ||
                            bytes_cached_ != published_bytes_))
                publish_counts();
        }
    }
    // An entry leaves the index. remove_entry also logs its range as invalidated: a miss that
    // planned with the entry (a union that absorbs it, an upgrade) must plan again, since
    // nothing watches those pages once it is unwatched. unindex_entry does not, for callers
    // that log the range themselves or replace the entry with one that covers it.
    void remove_entry(Entry *e) noexcept;
    void unindex_entry(Entry *e) noexcept;
    void log_invalidation(uintptr_t start, uintptr_t end) noexcept
    {
        uint64_t count = inval_count_.load(std::memory_order_relaxed);
        inval_log_[count % kInvalLog] = Range{start, end, 0};
        inval_count_.store(count + 1, std::memory_order_release);
    }
    // Inside a write section (the memo's invalidation relies on it: see memo_fill).
    void retire(Reg *r) noexcept;
    // Retires dev's registrations of e (*retired: whether there was one) and returns e's other
    // registrations, in order, as the list the caller publishes in e->regs.
    Reg *retire_device_regs(Entry *e, Device *dev, bool *retired) noexcept;
    // Every cached registration of dev retired, emptied entries removed (write section held;
    // maintain.cc): detach and vmt_device_flush.
    void retire_all_of(Device *dev) noexcept;
    // Removes every entry overlapping [start, end) (touching: also those ending at start or
    // starting at end), inside a write section; returns how many.
    size_t remove_overlapping(uintptr_t start, uintptr_t end, bool touching) noexcept;
    size_t invalidate_locked(uintptr_t start, uintptr_t end) noexcept;
    bool unmap_in_flight(uintptr_t a0, uintptr_t a1) const noexcept;
    void wait_for_unmaps(std::unique_lock<SpinLock> &g) noexcept;  // until an unmap ends
    // Whether an entry overlaps [start, end): under the lock, or inside a sequence check.
    bool index_overlaps(uintptr_t start, uintptr_t end) const noexcept;
    bool maybe_cached(uintptr_t start, uintptr_t end) const noexcept;  // without the lock
    bool invalidated_since(uint64_t mark, uintptr_t a0, uintptr_t a1) const noexcept;
    void lru_push_head(Entry *e) noexcept;
    void lru_unlink(Entry *e) noexcept;
    void lru_second_chance() noexcept;  // the tail (oldest) becomes the head (youngest)
    // Evicts at least `want` entries, and more while the cache is past its limits or
    // for_dev could not take one more registration of adding_bytes.
    size_t evict_locked(Device *for_dev, Entry *keep, size_t want, size_t adding_bytes = 0) noexcept;
    // A miss's insert past the cache's limits: evicts, and lets what it retires for
    // max_entries alone wait for the batch while the pinned bytes stay within max_bytes.
    // false: a lane within its share, which leaves the eviction to steal_one (after the lock).
    bool evict_for_insert(Entry *keep) noexcept;
    void evict_past_limits(Entry *keep) noexcept;  // evict_for_insert's eviction in this lane
    // A soft-limited device's insert past its limits (VMT_DEVICE_SOFT_LIMITS): evicts its
    // least recently used, which wait in limbo until dev->soft_batch of its registrations
    // are leaving. Whether they are due now (then the caller reclaims).
    bool evict_soft_locked(Device *dev, Entry *keep, size_t adding_bytes) noexcept;
    struct DeviceLeaving {  // a device's registrations retired, not deregistered yet
        size_t regions = 0;
        size_t bytes = 0;
    };
    // Past its own limits with one more registration of adding_bytes, even once `leaving`
    // has been deregistered. Inline: a miss past a soft limit asks it once per candidate.
    bool device_full(const Device *dev, DeviceLeaving leaving, size_t adding_bytes) const noexcept
    {
        // What is leaving is counted in regions and bytes still (retired, not deregistered
        // yet). A soft-limited device keeps its own count of it (retire() on), which includes
        // `leaving`; a device that refuses past its limits holds them still, and only the
        // caller's own evictions, reclaimed right after, count.
        if (device_soft_limited(dev))
            leaving = DeviceLeaving{dev->regions_leaving, dev->bytes_leaving};
        size_t regions = dev->regions - std::min(leaving.regions, dev->regions);
        size_t bytes = dev->bytes - std::min(leaving.bytes, dev->bytes);
        if (dev->ops.max_regions && regions + 1 > dev->ops.max_regions)
            return true;
        return dev->ops.max_bytes && bytes + adding_bytes > dev->ops.max_bytes;
    }
    // Past the cache's limits, or (dev set) dev past its own with one more of adding_bytes.
    bool over_limits(Device *dev, size_t adding_bytes) const noexcept
    {
        if (entries_seen() > max_entries_ || bytes_seen() > max_bytes_)
            return true;
        return dev && device_full(dev, DeviceLeaving{}, adding_bytes);
    }
    static bool device_checks_mapped(const Device *dev) noexcept
    {
        return dev->ops.flags & VMT_DEVICE_CHECKS_MAPPED;
    }
    static bool device_has_limits(const Device *dev) noexcept
    {
        return dev->ops.max_regions || dev->ops.max_bytes;
    }
    // Limits of its own that a miss must make room for before it registers.
    static bool device_evicts_first(const Device *dev) noexcept
    {
        return device_has_limits(dev) && !(dev->ops.flags & VMT_DEVICE_SOFT_LIMITS);
    }
    // Limits that a miss meets after it registers (VMT_DEVICE_SOFT_LIMITS).
    static bool device_soft_limited(const Device *dev) noexcept
    {
        return device_has_limits(dev) && (dev->ops.flags & VMT_DEVICE_SOFT_LIMITS);
    }
    // Whether dev's misses absorb cached ranges that only touch them (plan_union).
    static bool merges_touching(const Device *dev) noexcept
    {
        return !(dev->ops.flags & VMT_DEVICE_MERGE_OVERLAPS_ONLY);
    }
    // A miss's mapped check of [a0, a1), where the device and the watch do not make one.
    bool miss_range_mapped(uintptr_t a0, uintptr_t a1) noexcept
    {
        return remember_mapped_ ? mapped_blocks_.mapped(a0, a1) : range_mapped(a0, a1);
    }

    void reclaim() noexcept;
    // A reclaim at once where the barrier is free, in two halves around the caller's unlock:
    // under lock_, what limbo_ holds is taken (taken false: not free, or a pass runs, and the
    // caller reclaims as it would have) and, for what no thread holds, counted and freed
    // there, the lock being held anyway; after it, the device calls.
    struct TakenLimbo {
        // A device's soft batch at once; past this, the ordinary pass does the rest (8 left
        // half of each batch to a second turn of the lock).
        static constexpr int kMax = (int)kSoftBatchMax;
        bool taken = false;  // reclaim_lock_ is held until reclaim_taken
        int count = 0;
        Device *dev[kMax];
        void *handle[kMax];
        Reg *rest = nullptr;            // held, or its entry to unwatch: reclaim_list's
    };
    void take_limbo_if_free(TakenLimbo *tk) noexcept;
    void reclaim_taken(TakenLimbo *tk) noexcept;
    // Counts a deregistration of r and frees it; its entry too where that was its last
    // registration and it needs no unwatch (else the entry is linked to free_later, which
    // is returned). lock_ is held.
    Entry *free_deregistered_locked(Reg *r, Entry *free_later) noexcept;
    void reclaim_settled() noexcept;  // also waits for a pass running in another thread
    // may_wait: a batch's pass, which may leave its list to wait for a grace period
    // (after_grace); else everything retired and not held is deregistered before it returns.
    void reclaim_pass(bool may_wait) noexcept;
    // *quiet_bound: where all it returns waited for grace periods, the newest of them (see
    // reclaim_list), else 0.
    Reg *after_grace(Reg *list, size_t bytes, bool may_wait, uint64_t *quiet_bound) noexcept;
    Reg *take_waiting() noexcept;                 // all of waiting_ (reclaim_lock_ held)
    static Reg *join_regs(Reg *a, Reg *b) noexcept;  // b after a (lists linked by next)
    // reclaim() once a batch has gathered, or at once where the reader barrier is free.
    void reclaim_if_due() noexcept;
    void defer_reclaim() noexcept;
    void reclaim_unless_busy() noexcept;
    // A batch's pass now (not waiting for 64), which may leave what it takes for a grace
    // period: what a miss evicted for a device's soft limit.
    void reclaim_soon() noexcept;
    void run_reclaim_passes(bool may_wait) noexcept;
    size_t deregister_held(Device *dev) noexcept;          // detach's reclaim of held ones
    Entry *free_reclaimed(Reg *done, Reg *keep) noexcept;  // reclaim's part under the lock
    Reg *detach_limbo_locked() noexcept;  // all of limbo_, for a pass (lock_ held)
    // A pass's work on a list taken from limbo_, after the reader barrier: deregisters and
    // frees what no thread holds, puts the rest back in limbo_.
    // quiet_bound: as holds_in_threads_many's, for all of list.
    void reclaim_list(Reg *list, uint64_t quiet_bound) noexcept;
    void release_entries(Entry *list) noexcept;            // and its part after
    // The device call of a deregistration; its counters are count_deregistration's, under
    // lock_ (so that a miss pays no atomic read-modify-write for statistics).
    static void deregister(Device *dev, void *handle) noexcept { dev->ops.dereg(dev->ctx, handle); }
    void count_deregistration(size_t len) noexcept;
    void count_registration(size_t len) noexcept;
    void notify_subscribers(uintptr_t start, size_t len) noexcept;
    void after_invalidation(size_t removed, uintptr_t start, size_t len) noexcept;
    void maybe_after_fork() noexcept;

    // The validity-word test: whether the tracker's word for a watch no longer holds the value
    // it had when the range was watched, i.e. the pages changed (trackers without words point
    // words_ at words that never change). W is an Entry or a memo slot.
    template <typename W>
    bool watch_changed(const W *w) const noexcept
    {
        uint32_t word = words_[w->watch_handle.load(std::memory_order_relaxed)].load(std::memory_order_acquire);
        return word != w->watch_expect.load(std::memory_order_relaxed);
    }
    bool watch_changed(const WatchToken &tok) const noexcept
    {
        return words_[tok.handle].load(std::memory_order_acquire) != tok.expect;
    }

    // ---- hit path: read-mostly ----
    alignas(64) std::atomic<uint64_t> seq_{0};
    const std::atomic<uint32_t> *words_ = nullptr;
    const std::atomic<uint32_t> *always_valid_ = nullptr;  // words_ of trackers without words
    bool caching_ = true;
    bool tracked_ = true;  // the tracker sees unmaps: a valid cached range is mapped
    bool unwatch_needed_ = true;  // the tracker's unwatch does something (watches_ranges)
    unsigned stat_slot_ = ~0u;
    RangeIndex index_{offsetof(Entry, leaf)};

    // A lossy memo in front of the index: page number -> the entry a lookup last found for it.
    // Never trusted: a memo entry is used only if it is in the index and covers the request
    // (the index is disjoint, so such an entry is the answer). Written only when a lookup had
    // to walk the tree, so steady hits write nothing here.
    // Each slot holds everything a hit needs (one cache line), under `stamp`: (fills << 32) |
    // memo epoch, odd while a filler writes the slot. A slot is valid while the low half of
    // its stamp is the cache's memo epoch. A retirement invalidates the slots its entry was
    // filled into (the entry lists up to four, Entry::memo_slots), or, for an entry filled
    // into more, moves the epoch, which invalidates every slot; so a slot never hands out a
    // retired registration, and a retirement leaves the rest of the memo valid (a workload
    // that evicts at every miss still hits through the memo). Readers check the stamp before
    // and after reading the rest (a sequence lock whose count also says which epoch the slot
    // belongs to), and once more after publishing their hold.
    struct alignas(64) MemoSlot {
        std::atomic<uint64_t> stamp;
        std::atomic<uint64_t> tag;     // page | device tag (memo_tag_of)
        std::atomic<uintptr_t> end;
        std::atomic<Entry *> entry;
        std::atomic<uint64_t> hold;       // make_slot(hold_key(registration), 1)
        std::atomic<uint32_t> denied;     // ~(the registration's access): one test on a hit
        std::atomic<uint32_t> watch_handle;
        std::atomic<uint32_t> watch_expect;
        // The first way's only: the low half of the tag last filled into the second way. A
        // hint, trusted by nobody: a get whose tag is in neither way (10^6 entries at random:
        // most gets) goes to the tree without waiting for the second way's line first.
        std::atomic<uint32_t> way1_hint;
        std::atomic<void *> handle;       // the registration's handle, for vmt_get_handle
    };
    static_assert(sizeof(MemoSlot) == 64, "a memo slot is one cache line");
    static constexpr size_t kMemoSlots = 32768;  // 2 MiB (see map_memo)
    static constexpr size_t kMemoSets = kMemoSlots / 2;
    MemoSlot *memo_ = nullptr;
    // A bit per memo set, clear when neither of its slots can be valid: a get of a page seen
    // for the first time then goes to the tree without reading the set, whose lines are
    // mostly not in any CPU cache (2 MiB), and a fresh miss would wait for memory twice
    // (~100 ns on these VMs, more than the rest of the miss). A hint only: set before a fill
    // publishes, cleared (under lock_) when a retirement leaves both slots invalid; a race
    // that clears it over a valid slot sends that page's gets to the tree once, and the tree
    // hit fills the slot and sets the bit again.
    alignas(64) std::atomic<uint64_t> memo_live_[kMemoSets / 64] = {};
    // Set number `set`'s bit in its word, memo_live_[set / 64] (memo_hit_ likewise).
    static uint64_t memo_live_bit(size_t set) noexcept { return 1ull << (set % 64); }
    // Sets it in one of those bitmaps.
    static void set_bit_of(std::atomic<uint64_t> *bits, size_t set) noexcept;
    void mark_set_live(size_t set) noexcept;
    void clear_live_sets() noexcept;
    // A bit per memo set, set when a get of one of its pages hit through the tree, never
    // cleared: a miss fills the memo for what it inserts only there (memo_fill_inserting).
    alignas(64) std::atomic<uint64_t> memo_hit_[kMemoSets / 64] = {};
    void mark_set_hit(Device *dev, uintptr_t addr) noexcept;
    // Moves by 2 (under lock_) when every slot must go (an entry with too many slots retired,
    // a tracker pausing hits), so its low half is always even and never 0; odd values are the
    // writing marks of slots. Readers compare only the low half: when it wraps, every slot is
    // invalidated first (clear_memo).
    // A wrap costs a write of every slot (2 MiB, ~250 us), once in 2^31 moves; tests
    // start the epoch just short of it (VMTRACK_TEST_EPOCH_WRAP, see create) to go through it.
    std::atomic<uint64_t> epoch_{2};
    uint64_t next_memo_device_ = 1;  // under lock_
public:
    uintptr_t memo_lookup_probing(Device *dev, uintptr_t addr, uintptr_t end, unsigned access,
                                  ThreadRecord *t) noexcept;
    void count_memo_hit(std::atomic<uint64_t> &hits, const MemoSlot *m) noexcept;
    void reclaim_now() noexcept { reclaim(); }
    // What this thread's device reg calls put off (defer_reclaim): run once the outermost
    // has returned.
    static void run_deferred_reclaims() noexcept;
private:
    // seq: the sequence count the caller found the entry under (a retirement is always in a
    // write section, whose start moves it).
    void memo_fill(uint64_t epoch, uint64_t seq, Device *dev, uintptr_t addr, Entry *e,
                   Reg *r) noexcept;
    void memo_fill_inserting(Device *dev, uintptr_t addr, Entry *e, Reg *r) noexcept;
    // memo_fill's parts: the slot for dev's page of addr, claimed (stamp odd, `writing`, the
    // set marked live), or nullptr; its fields.
    MemoSlot *memo_claim(uint64_t epoch, Device *dev, uintptr_t addr, size_t *slot,
                         uint64_t *writing) noexcept;
    void memo_write(MemoSlot &m, Device *dev, uintptr_t addr, Entry *e, Reg *r) noexcept;
    void note_memo_slot(Entry *e, size_t slot) noexcept;
    void invalidate_slot(MemoSlot &m, const Entry *e) noexcept;
    void give_up_slot(MemoSlot &m) noexcept;  // a filler's, after its publish failed
    void forget_memo_of(Entry *e) noexcept;
    void move_epoch() noexcept;
    void clear_memo() noexcept;

    // ---- unmaps that need no lock ----
    // An unmap of a range where nothing is cached, while no miss is in progress, needs neither
    // the index lock nor an in-flight record: it only counts itself in quick_unmaps_. A miss
    // counts itself in misses_active_ first and then waits for quick_unmaps_ to reach 0, so
    // any unmap it could race either saw the miss (and took the locked path) or ended before
    // the miss looked at the pages. Both counters are seq_cst: each side writes its own, then
    // reads the other's.
    alignas(64) std::atomic<uint64_t> quick_unmaps_{0};
    std::atomic<uint64_t> misses_active_{0};
    class MissInProgress;
    static constexpr uint64_t kLockedUnmap = 0, kQuickUnmap = 1;  // unmap_begin's tokens

    // ---- writers ----
    alignas(64) mutable SpinLock lock_;
    FutexEvent unmap_done_;          // an unmap ended (wait_for_unmaps)
    int unmap_waiters_ = 0;          // under lock_: threads in wait_for_unmaps
    std::unique_ptr<Tracker> own_tracker_;  // the head's; its lanes share it
    Tracker *tracker_ = nullptr;
    std::string tracker_report_;
    Pool<Entry> entries_;
    Pool<Reg> regs_;
    Device *devices_ = nullptr;
    // A ring through Entry::lru_prev/lru_next (evict.cc): the head is the youngest, the tail
    // (the head's prev) the oldest.
    Entry *lru_head_ = nullptr, *lru_tail_ = nullptr;
    size_t entry_count_ = 0;
    size_t bytes_cached_ = 0;      // sum of entry lengths in the index
    size_t max_entries_ = 0, max_bytes_ = 0;
    // Lanes (below): the head's totals, where there are lanes; under lock_, this lane's counts
    // as last added to them (publish_counts, at the end of a write section, only where they
    // moved: a miss that evicts as it inserts writes nothing shared); its part of the limits.
    struct LaneTotals;
    LaneTotals *totals_ = nullptr;
    size_t published_entries_ = 0, published_bytes_ = 0;
    size_t share_entries_ = SIZE_MAX, share_bytes_ = SIZE_MAX;
    uint16_t max_regs_alive_ = kMaxRegsAlive;  // Entry::regs_alive's bound (insert_plan)
    bool merge_ = true;
    int write_depth_ = 0;
    std::mutex fork_fixup_lock_;

    Reg *limbo_ = nullptr;         // retired, maybe held
    std::atomic<bool> limbo_nonempty_{false};
    // Retired since the last reclaim pass (the batch: count and bytes), and all in limbo_
    // (held ones included).
    std::atomic<size_t> limbo_new_{0}, limbo_new_bytes_{0}, limbo_total_{0};
    // Of limbo_new_, those that must not wait for the batch where the barrier is free: every
    // retirement but an eviction for max_entries alone (insert_plan). A merge, an upgrade, an
    // invalidation, a flush deregister at once, as callers (UCX's semantics) expect; an entry
    // evicted only to keep the index at its size waits like any retirement of a process
    // with more than one thread (its pinned bytes still count: see insert_plan).
    std::atomic<size_t> limbo_urgent_{0};
    bool retire_may_wait_ = false;  // under lock_: retire() leaves limbo_urgent_ alone
    // Under lock_: a miss that may reclaim at once what it retires, in the same turn of the lock
    // (take_limbo_if_free), counts this cache in g_retiring_caches only if something is still
    // retired when it lets the lock go (count_retiring_left). Where all of it went, nobody
    // could have needed the count, and two locked instructions on a line every thread reads
    // are saved: no other thread owns a record when take_limbo_if_free takes, so none has a
    // hold whose fast put could have missed a retirement.
    bool defer_retiring_count_ = false;
    bool retiring_uncounted_ = false;  // limbo_total_ > 0, g_retiring_caches not raised for it
    void count_retiring_left() noexcept;
    SpinLock reclaim_lock_;        // one reclaimer at a time; never taken under lock_
    // Batches taken from limbo_ that wait until every other thread has noted their grace
    // period (after_grace): changed under reclaim_lock_, read without it as hints. Their
    // registrations count in limbo_total_ still, and their new bytes in `bytes`. Two, so that
    // two threads that each start a period at their own pass free each other's batch at the
    // next one instead of falling back to the barrier.
    struct WaitingBatch {
        Reg *list = nullptr;
        uint64_t period = 0;
        size_t bytes = 0;
    };
    static constexpr int kWaitingBatches = 2;
    WaitingBatch waiting_[kWaitingBatches];
    // What the slots hold, for readers without reclaim_lock_ (every miss over max_entries
    // reads the bytes): how many batches wait, and their new bytes together.
    std::atomic<int> waiting_batches_{0};
    std::atomic<size_t> waiting_bytes_{0};
    bool waiting_nonempty() const noexcept
    {
        return waiting_batches_.load(std::memory_order_relaxed) != 0;
    }
    Reg *take_batch(WaitingBatch &w) noexcept;
    void park_batch(WaitingBatch &w, Reg *list, size_t bytes) noexcept;

    struct Range { uintptr_t start, end; int depth; };
    Range unmaps_[kMaxUnmapsInFlight] {};
    int unmaps_count_ = 0;
    static constexpr int kMaxPausedEvents = 64;
    Range paused_events_[kMaxPausedEvents] {};  // subscriber events held back by pause_hits
    int paused_events_count_ = 0;
    static constexpr unsigned kInvalLog = 64;
    Range inval_log_[kInvalLog] {};
    // Written under lock_; read without it only by plan_without_lock, for a plan's mark.
    std::atomic<uint64_t> inval_count_{0};

    // What the mapped checks of misses learnt, where the tracker hears every unmap
    // (remember_mapped_); forgotten by every unmap and invalidation.
    MappedBlocks mapped_blocks_;
    bool remember_mapped_ = false;
    bool watch_checks_mapped_ = false;  // Tracker::watch_checks_mapped

    // Subscribers: read by every event under a shared lock, changed rarely.
    pthread_rwlock_t subs_lock_ = PTHREAD_RWLOCK_INITIALIZER;
    static constexpr int kMaxSubscribers = 16;
    struct Sub { vmt_event_fn fn; void *arg; } subs_[kMaxSubscribers] {};
    int nsubs_ = 0;

    // Statistics (hits are counted per thread, see holds.h). One struct, so that the child of
    // a fork resets them all at once (fork.cc): a counter added here cannot be left out.
    // misses, registrations, deregistrations, evictions, bytes_registered and reclaim_passes
    // change only under lock_ (add_under_lock): a miss passes through it anyway, and an
    // atomic add costs it as much as a lock.
    struct Counters {
        std::atomic<uint64_t> hits_shared{0}, misses{0}, registrations{0}, deregistrations{0},
            invalidations{0}, evictions{0}, uncached{0}, merges{0}, upgrades{0}, retries{0},
            deferred{0}, memo_wraps{0}, bytes_registered{0}, reclaim_passes{0},
            reclaim_barriers{0};
    } counts_;

    std::atomic<bool> needs_fork_fixup_{false};
    Cache *next_cache_ = nullptr;  // in the list of all caches (for fork)

    // ---- the change log (changes.cc), the head's, once a mark was asked for ----
    struct ChangeSlot;
    static constexpr uint64_t kChangeLog = 512;  // writes: the last 256 changes, each twice
    std::atomic<ChangeSlot *> change_log_{nullptr};
    std::atomic<uint64_t> changes_{0};
    void log_change(uintptr_t start, size_t len) noexcept;
    void free_change_log() noexcept;

    // ---- lanes (lanes.cc) ----
    // The cache vmt_cache_create made is the head: it owns the tracker, the subscribers, the
    // granule table and the other lanes, and is lane 0. Each lane is a whole cache of its own
    // for what its granules hold; every tracker event goes to all of them (the head's sink
    // methods), and the limits (max_entries, max_bytes) are the head's, for all lanes
    // together (totals_). Devices with limits of their own stay in the head.
    Cache *head_ = this;
    unsigned lane_ = 0;                 // this lane's number
    unsigned nlanes_ = 1;               // the head's
    Cache *lanes_[kMaxLanes] = {this};  // the head's; lanes_[0] is the head
    std::atomic<uint8_t> *lane_owner_ = nullptr;  // the granule table (the head's), or nullptr
    struct alignas(64) LaneTotals {
        std::atomic<size_t> entries{0}, bytes{0};
    };
    LaneTotals lane_totals_;            // the head's: what every lane has published
    // totals_, published_* and share_* are beside entry_count_, which every
    // miss reads with them. What other lanes read of this one (steal_one):
    std::atomic<size_t> lane_entries_{0}, lane_bytes_{0};
    size_t entries_seen() const noexcept
    {
        return totals_ ? totals_->entries.load(std::memory_order_relaxed) - published_entries_ +
                             entry_count_
                       : entry_count_;
    }
    size_t bytes_seen() const noexcept
    {
        return totals_ ? totals_->bytes.load(std::memory_order_relaxed) - published_bytes_ +
                             bytes_cached_
                       : bytes_cached_;
    }
    void publish_counts() noexcept;
    // How many lanes a cache with these limits gets (VMTRACK_LANES, the CPUs, the limits).
    static unsigned lanes_for(size_t max_entries, size_t max_bytes) noexcept;
    // The head's, at create: lanes 1..n-1, configured as the head.
    int add_lanes(unsigned n, const struct vmt_cache_opts *opts, bool merge) noexcept;
    // create's parts: limits and test settings from opts; what the tracker (the head's) tells
    // the cache, and the head's hit counter; the list of all caches (fork).
    void configure(const struct vmt_cache_opts *opts, bool merge) noexcept;
    void adopt_tracker(Cache *head) noexcept;
    void join_cache_list() noexcept;
    // This lane's part of the limits; whether it holds more.
    bool over_share() const noexcept;
    // Past the limits, within its own share: the lane with most over its share evicts one
    // (taking that lane's lock; called with none held).
    void steal_one() noexcept;
    // The per-lane work of the TrackerSink calls, flush and the rest.
    void invalidate_lane(uintptr_t start, size_t len) noexcept;
    uint64_t unmap_begin_lane(uintptr_t start, size_t len) noexcept;
    void unmap_end_lane(uintptr_t start, size_t len, uint64_t token) noexcept;
    void pause_lane() noexcept;
    void resume_lane() noexcept;
    void flush_lane() noexcept;
    int flush_device_lane(Device *dev) noexcept;
    void stats_lane(struct vmt_stats *v) noexcept;
    size_t entries_in_all_lanes() noexcept;  // the head's: one instant's count
    // dev's twins in the other lanes (attach), and their detach.
    int attach_lane_twins(Device *dev) noexcept;
    // The first time a lane other than the head's owns memory: from now on the devices with
    // twins route their gets (Device::lane_owner). Under lock_, as attach sets them up.
    void route_devices() noexcept;
    std::atomic<bool> routing_{false};  // changed under lock_, read without it too
    void detach_lane_twins(Device *dev) noexcept;
    // The full path's look at the granule of a: where nobody owns it yet, it becomes the
    // calling thread's home lane's. The device to serve the get.
    Device *claim_granule(Device *dev, uintptr_t a) noexcept;
    unsigned home_lane() noexcept;          // the calling thread's, in this cache (the head)
    std::atomic<unsigned> next_home_{0};
    void populate_memo_once() noexcept;     // a lane's, at its first granule
    std::atomic<bool> memo_populated_{false};
    // An insert's granules that nobody owns yet become this lane's (a range that goes past
    // its first granule is then found from every one of them).
    void claim_granules(uintptr_t start, uintptr_t end) noexcept;
    void destroy_lanes() noexcept;  // the head's destructor, before the tracker goes
};

// The memo's 2 MiB, aligned for a huge page; populate: faulted in now (lifecycle.cc).
void *map_memo(bool populate);
void populate_memo(void *memo);

// The parts of vmt_get and vmt_put that are not the common hit (hit.cc).
int get_full(Device *d, const void *addr, size_t len, unsigned access, struct vmt_reg **out);
int get_rare(Device *d, const void *addr, size_t len, unsigned access, struct vmt_reg **out,
             uintptr_t found);
void memo_backout_outlined(Device *d, uintptr_t found);
int get_rare_handle(Device *d, const void *addr, size_t len, unsigned access,
                    struct vmt_reg **out, uintptr_t found, void **handle);
void put_full(struct vmt_reg *reg, bool hold_released);

}  // namespace vmt

#endif
