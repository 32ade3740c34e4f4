// Lanes: a cache of several indexes, so that threads missing on different memory do not wait
// for each other.
//
// Two threads missing together on one index shared its lock and every line a miss writes (the
// lock, the sequence count, the LRU ends, the pools, the counts, the index's upper nodes): on
// these VMs a line takes 60-150 ns to move between CPUs, and two threads did 0.8-0.9x the
// misses of one. Each lane is a whole Cache (index, lock, LRU list, pools, memo, limbo) for
// the granules (64 MiB of address space each) it owns; the head, the cache the caller made, is
// lane 0 and owns the tracker, the subscribers and the granule table. A granule belongs to
// nobody until the first full-path get of an address in it (claim_granule), which gives it to
// the calling thread's home lane (threads take turns); an insert gives it the granules its
// range reaches into that are nobody's yet (claim_granules), so that a range is found from
// every granule it covers. Once given, a granule never changes hands while the cache lives.
//
// Invariants:
// - A lane is as correct as a cache alone: every tracker event reaches every lane (the head's
//   TrackerSink calls below go to each), so a lane never keeps a range that was unmapped.
// - Two lanes may cache overlapping ranges (a range that reaches into a granule another lane
//   already owns): each is valid on its own, as two caches' would be.
// - max_entries and max_bytes bound all lanes together. Each lane publishes its counts in the
//   head's totals at the end of a write section where they moved, and judges the limits by
//   the totals; a lane past them evicts its own least recently used while it holds more than
//   its share (the limits divided by the lanes), else the lane most past its share gives one
//   up (steal_one). Lanes that insert together may pass the limits by one entry each for as
//   long as that takes.
// - A device with limits of its own (max_regions, max_bytes) lives in the head only, and so do
//   all devices of a cache of one lane: nothing changes for them.
// - Gets: a device with twins sends each get to the twin of the lane that owns its granule
//   (Device::lane_owner), but only once a lane other than the head's owns memory (until then
//   all is lane 0's, and a hit pays one test); a granule nobody owns is given on the full path.
//   The first thread to give a cache memory has lane 0, the next lane 1, and so on.
// - Locks: one lane's at a time, except pause_hits, which takes them all in lane order (so
//   does fork's prepare handler: the lanes join the list of caches in that order). The fork
//   handler never calls a patched libc entry (its invalidation would take a lane lock).
#include "config.h"
#include "cache/cache.h"

#include <sched.h>
#include <sys/mman.h>
#include <unistd.h>

#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <mutex>
#include <new>

#include "cache/internal.h"
#include "util/env.h"
#include "util/log.h"

namespace vmt {

namespace {
// A lane keeps at least this much of the limits: a cache limited to fewer entries or bytes
// than two lanes' worth has one lane, and its LRU order is exactly the one list's.
constexpr size_t kMinLaneEntries = 256;
constexpr size_t kMinLaneBytes = size_t{64} << 20;

unsigned cpus_here()
{
    cpu_set_t set;
    if (sched_getaffinity(0, sizeof set, &set) == 0)
        return (unsigned)CPU_COUNT(&set);
    long n = sysconf(_SC_NPROCESSORS_ONLN);
    return n > 0 ? (unsigned)n : 1;
}

static_assert(kMaxLanes == kMostLanes, "VMTRACK_LANES takes what a cache can have");

// VMTRACK_LANES: at most this many lanes (1: none); 0 where unset or wrong (said once here;
// vmt_shared refuses it, env.cc).
unsigned lanes_from_env()
{
    const char *v = getenv("VMTRACK_LANES");
    unsigned n;
    if (!v || !*v)
        return 0;
    if (parse_lanes(v, &n) < 0) {
        static std::once_flag warned;
        std::call_once(warned, [v] {
            VMT_LOG_WARN("VMTRACK_LANES=%s: not a number from 1 to %u; ignored", v, kMaxLanes);
        });
        return 0;
    }
    return n;
}
}  // namespace

unsigned Cache::lanes_for(size_t max_entries, size_t max_bytes) noexcept
{
    unsigned n = lanes_from_env();
    if (!n)
        n = std::min(cpus_here(), kMaxLanes);
    n = (unsigned)std::min<size_t>(n, max_entries / kMinLaneEntries);
    n = (unsigned)std::min<size_t>(n, max_bytes / kMinLaneBytes);
    return std::max(n, 1u);
}

int Cache::add_lanes(unsigned n, const struct vmt_cache_opts *opts, bool merge) noexcept
{
    // One byte per granule of user space (2 MiB), of which only the pages of granules ever
    // looked up are touched.
    void *table = mmap(nullptr, kGranules, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (table == MAP_FAILED)
        return -ENOMEM;
    lane_owner_ = static_cast<std::atomic<uint8_t> *>(table);
    totals_ = &lane_totals_;
    for (unsigned i = 1; i < n; i++) {
        Cache *l = new (std::nothrow) Cache();
        if (!l)
            return -ENOMEM;
        l->head_ = this;
        l->lane_ = i;
        l->configure(opts, merge);
        l->lane_owner_ = lane_owner_;
        l->totals_ = &lane_totals_;
        l->memo_ = static_cast<MemoSlot *>(map_memo(false));
        if (!l->memo_) {
            delete l;
            return -ENOMEM;
        }
        lanes_[i] = l;
        nlanes_ = i + 1;
    }
    for (unsigned i = 0; i < n; i++) {
        lanes_[i]->share_entries_ = max_entries_ / n;
        lanes_[i]->share_bytes_ = max_bytes_ / n;
    }
    return 0;
}

void Cache::destroy_lanes() noexcept
{
    for (unsigned i = 1; i < nlanes_; i++)
        delete lanes_[i];
    nlanes_ = 1;
    if (lane_owner_)
        munmap(static_cast<void *>(lane_owner_), kGranules);
    lane_owner_ = nullptr;
}

// ---- the tracker's events, for every lane ----

void Cache::invalidate(uintptr_t start, size_t len) noexcept
{
    log_change(start, len);
    for (unsigned i = 0; i < nlanes_; i++)
        lanes_[i]->invalidate_lane(start, len);
}

uint64_t Cache::unmap_begin(uintptr_t start, size_t len) noexcept
{
    uint64_t token = 0;  // bit i: lane i's token (kQuickUnmap or kLockedUnmap)
    log_change(start, len);  // before the system call, which follows unmap_begin
    for (unsigned i = 0; i < nlanes_; i++)
        token |= lanes_[i]->unmap_begin_lane(start, len) << i;
    return token;
}

void Cache::unmap_end(uintptr_t start, size_t len, uint64_t token) noexcept
{
    // Again after the system call, before the misses it held go on (changes.cc: a mark taken
    // between unmap_begin and the system call is newer than the first write).
    log_change(start, len);
    for (unsigned i = 0; i < nlanes_; i++)
        lanes_[i]->unmap_end_lane(start, len, (token >> i) & 1);
}

void Cache::pause_hits() noexcept
{
    for (unsigned i = 0; i < nlanes_; i++)
        lanes_[i]->pause_lane();
}

void Cache::resume_hits() noexcept
{
    // The head last: it holds the subscribers' events, and tells them once no lock is held.
    for (unsigned i = nlanes_; i-- > 0;)
        lanes_[i]->resume_lane();
}

void Cache::reap() noexcept
{
    for (unsigned i = 0; i < nlanes_; i++)
        lanes_[i]->reclaim_if_due();
}

// ---- the caller's calls, for every lane ----

int Cache::invalidate_manual(uintptr_t start, size_t len)
{
    if (!len || start + len < start)
        return -EINVAL;
    invalidate(start, len);
    for (unsigned i = 0; i < nlanes_; i++)
        lanes_[i]->reclaim();
    return 0;
}

int Cache::flush()
{
    maybe_after_fork();
    tracker_->poll();
    for (unsigned i = 0; i < nlanes_; i++)
        lanes_[i]->flush_lane();
    return 0;
}

int Cache::flush_device(Device *dev)
{
    tracker_->poll();
    int rc = flush_device_lane(dev);
    if (rc == 0 && dev->laned)
        for (unsigned i = 1; i < nlanes_; i++)
            lanes_[i]->flush_device_lane(dev->lane_devs[i]);
    return rc;
}

// ---- devices ----

int Cache::attach_lane_twins(Device *dev) noexcept
{
    dev->lane_devs[0] = dev;
    for (unsigned i = 1; i < nlanes_; i++) {
        Device *twin = nullptr;
        int rc = lanes_[i]->attach(&dev->ops, dev->ctx, &twin);
        if (rc < 0) {
            while (--i > 0)
                lanes_[i]->detach(dev->lane_devs[i]);
            return rc;
        }
        twin->name = dev->name;
        dev->lane_devs[i] = twin;
    }
    std::lock_guard<SpinLock> g(lock_);
    dev->laned = true;
    if (routing_.load(std::memory_order_relaxed))
        dev->lane_owner.store(lane_owner_, std::memory_order_release);
    return 0;
}

void Cache::route_devices() noexcept
{
    std::lock_guard<SpinLock> g(lock_);
    if (routing_.load(std::memory_order_relaxed))
        return;
    routing_.store(true, std::memory_order_release);
    for (Device *d = devices_; d; d = d->next)
        if (d->laned)
            d->lane_owner.store(lane_owner_, std::memory_order_release);
}

void Cache::detach_lane_twins(Device *dev) noexcept
{
    // The twins stay allocated (and lane_devs with them) until the cache goes: a get after
    // the detach, which is the caller's error, still finds a detached device to report.
    for (unsigned i = 1; i < nlanes_; i++)
        lanes_[i]->detach(dev->lane_devs[i]);
}

namespace {
// The calling thread's home lanes, one per cache it has given memory to lately. Threads take
// turns in the order they first give a cache memory (Cache::next_home_), so that the first, and
// the only one of a process of one thread, has lane 0, whose hits cost nothing for lanes. A
// thread of more caches than this forgets the oldest, and may then get another lane there.
constexpr int kHomesKept = 4;
struct Home {
    const void *cache;
    unsigned lane;
};
__thread Home t_homes[kHomesKept] __attribute__((tls_model("initial-exec")));
__thread unsigned t_homes_next __attribute__((tls_model("initial-exec")));
}  // namespace

unsigned Cache::home_lane() noexcept
{
    for (const Home &h : t_homes)
        if (h.cache == this && h.lane < nlanes_)  // (a cache gone may have left its address)
            return h.lane;
    unsigned lane = next_home_.fetch_add(1, std::memory_order_relaxed) % nlanes_;
    t_homes[t_homes_next++ % kHomesKept] = Home{this, lane};
    return lane;
}

Device *Cache::claim_granule(Device *dev, uintptr_t a) noexcept
{
    uintptr_t g = a >> kGranuleShift;
    if (g >= kGranules)
        return dev;  // past 47 bits (five-level paging): the head's
    std::atomic<uint8_t> &owner = lane_owner_[g];
    uint8_t o = owner.load(std::memory_order_relaxed);
    if (o == 0) {
        uint8_t mine = (uint8_t)(home_lane() + 1);
        if (owner.compare_exchange_strong(o, mine, std::memory_order_relaxed)) {
            o = mine;
            lanes_[o - 1]->populate_memo_once();
        }
    }
    if (o > 1 && !routing_.load(std::memory_order_acquire))
        route_devices();
    return o > 1 ? dev->lane_devs[o - 1] : dev;
}

void Cache::claim_granules(uintptr_t start, uintptr_t end) noexcept
{
    uint8_t mine = (uint8_t)(lane_ + 1);
    uintptr_t last = std::min((end - 1) >> kGranuleShift, kGranules - 1);
    for (uintptr_t g = start >> kGranuleShift; g <= last; g++) {
        // A load first: the line is read by every get of these granules, and a failed
        // compare-exchange would still take it from their CPUs.
        uint8_t none = 0;
        if (lane_owner_[g].load(std::memory_order_relaxed) == 0)
            lane_owner_[g].compare_exchange_strong(none, mine, std::memory_order_relaxed);
    }
}

void Cache::populate_memo_once() noexcept
{
    // Its first granule: the memo's page is faulted in now, as the head's is at create, and
    // not by the hits that follow (a new cache's first 5000 random gets took 190 ns each,
    // against 120 in the head's lane, when lane 1's memo came in under them).
    if (!memo_populated_.exchange(true, std::memory_order_relaxed))
        populate_memo(memo_);
}

// ---- limits for all lanes together ----

void Cache::publish_counts() noexcept
{
    // Where a count moved (write_end asks): an add to the head's line, which every lane reads.
    if (entry_count_ != published_entries_) {
        totals_->entries.fetch_add(entry_count_ - published_entries_, std::memory_order_relaxed);
        published_entries_ = entry_count_;
        lane_entries_.store(entry_count_, std::memory_order_relaxed);
    }
    if (bytes_cached_ != published_bytes_) {
        totals_->bytes.fetch_add(bytes_cached_ - published_bytes_, std::memory_order_relaxed);
        published_bytes_ = bytes_cached_;
        lane_bytes_.store(bytes_cached_, std::memory_order_relaxed);
    }
}

bool Cache::over_share() const noexcept
{
    return entry_count_ > share_entries_ || bytes_cached_ > share_bytes_;
}

void Cache::steal_one() noexcept
{
    Cache *h = head_;
    size_t share_entries = share_entries_, share_bytes = share_bytes_;
    Cache *victim = this;  // where no lane holds more than its share
    size_t most = 0;
    for (unsigned i = 0; i < h->nlanes_; i++) {
        Cache *l = h->lanes_[i];
        size_t e = l->lane_entries_.load(std::memory_order_relaxed);
        size_t b = l->lane_bytes_.load(std::memory_order_relaxed);
        // Past the share in entries or in bytes, measured in shares (so that both compare).
        size_t past = std::max(e > share_entries ? (e - share_entries) * 1024 / (share_entries + 1) : 0,
                               b > share_bytes ? (b - share_bytes) / (share_bytes / 1024 + 1) : 0);
        if (past > most) {
            most = past;
            victim = l;
        }
    }
    {
        std::lock_guard<SpinLock> g(victim->lock_);
        if (victim->over_limits(nullptr, 0)) {  // another may have made room meanwhile
            victim->write_begin();
            victim->evict_past_limits(nullptr);
            victim->write_end();
        }
    }
    victim->reclaim_if_due();
}

}  // namespace vmt
