// A cache's life and its devices': create, destroy, attach, detach.
//
// Invariant: once vmt_device_detach returns, the device has no registration left. Its entries'
// registrations retire under the index lock (inside a write section, so no hit can find them
// after), and what is still held is deregistered all the same, because the caller may destroy
// the device right after; a later vmt_put of such a registration is reported as misuse. Its
// memo tag is kNoMemo from that moment, which sends every vmt_get of it to the full path.
// A cache being destroyed detaches every device first and stops the tracker last: the
// tracker may call back into the cache until it is gone.
#include "config.h"
#include "cache/cache.h"

#include <sys/mman.h>
#include <sys/resource.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <cstdlib>
#include <cstring>
#include <new>

#include "cache/internal.h"
#include "trackers/select.h"
#include "util/log.h"

namespace vmt {

namespace {

constexpr size_t kDefaultMaxEntries = 262144;

// Which caches own a per-thread hit counter (one bit per slot of ThreadRecord::hits).
std::atomic<unsigned> g_stat_slots{0};

size_t default_max_bytes()
{
    struct rlimit rl;
    bool accounted = geteuid() != 0;  // root (CAP_IPC_LOCK) pins without RLIMIT_MEMLOCK
    if (accounted && getrlimit(RLIMIT_MEMLOCK, &rl) == 0 && rl.rlim_cur != RLIM_INFINITY)
        return rl.rlim_cur ? (size_t)rl.rlim_cur : page_size();
    long pages = sysconf(_SC_PHYS_PAGES);
    return pages > 0 ? (size_t)pages * page_size() / 2 : (size_t)1 << 32;
}

// The memo is one 2 MiB block, aligned so that it can be a single huge page: hits land at
// random in it, and with 4 KiB pages each one would also miss the first-level TLB.
constexpr size_t kMemoBytes = 2u << 20;
}  // namespace

void *map_memo(bool populate)
{
    void *raw = mmap(nullptr, 2 * kMemoBytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                     -1, 0);
    if (raw == MAP_FAILED)
        return nullptr;
    uintptr_t start = reinterpret_cast<uintptr_t>(raw);
    uintptr_t aligned = (start + kMemoBytes - 1) & ~(uintptr_t)(kMemoBytes - 1);
    if (aligned > start)
        munmap(raw, aligned - start);
    if (aligned + kMemoBytes < start + 2 * kMemoBytes)
        munmap(reinterpret_cast<void *>(aligned + kMemoBytes), start + 2 * kMemoBytes - aligned - kMemoBytes);
    madvise(reinterpret_cast<void *>(aligned), kMemoBytes, MADV_HUGEPAGE);  // a hint; fine if refused
    // A lane other than the head's may never be used (a process with one thread): its memo
    // costs nothing until then (Cache::populate_memo_once).
    if (populate)
        populate_memo(reinterpret_cast<void *>(aligned));
    return reinterpret_cast<void *>(aligned);
}

void populate_memo(void *memo)
{
#ifdef MADV_POPULATE_WRITE
    // Faulted in now, not by the first hit: zeroing the 2 MiB page took 120-300 us here, a
    // stall inside one vmt_get. Kernels before 5.14 refuse it (EINVAL), and it is then as before.
    // The system call itself: no patcher in front of madvise needs to see this.
    syscall(SYS_madvise, memo, kMemoBytes, MADV_POPULATE_WRITE);
#else
    (void)memo;
#endif
}

void Cache::configure(const struct vmt_cache_opts *opts, bool merge) noexcept
{
    const char *wrap_soon = getenv("VMTRACK_TEST_EPOCH_WRAP");
    if (wrap_soon && strcmp(wrap_soon, "1") == 0)
        epoch_.store((1ull << 32) - 2 * 1024);  // 1024 moves short of the wrap
    // Tests reach an entry's registration limit with fewer than 65535 (each of which waits in
    // the reclaim's list, held).
    if (const char *regs = getenv("VMTRACK_TEST_ENTRY_REGS")) {
        unsigned long n = strtoul(regs, nullptr, 10);
        if (n >= 2 && n <= kMaxRegsAlive)
            max_regs_alive_ = (uint16_t)n;
    }
    merge_ = merge && !(opts && (opts->flags & VMT_CACHE_NO_MERGE));
    max_entries_ = opts && opts->max_entries ? opts->max_entries : kDefaultMaxEntries;
    max_bytes_ = opts && opts->max_bytes ? opts->max_bytes : default_max_bytes();
}

void Cache::adopt_tracker(Cache *head) noexcept
{
    tracker_ = head->own_tracker_.get();
    words_ = tracker_->words();
    always_valid_ = Tracker::always_valid_words();
    caching_ = tracker_->caches();
    tracked_ = strcmp(tracker_->name(), "none") != 0;
    unwatch_needed_ = tracker_->watches_ranges();
    remember_mapped_ = tracker_->hears_every_unmap();
    watch_checks_mapped_ = tracker_->watch_checks_mapped();
    stat_slot_ = head->stat_slot_;
}

void Cache::join_cache_list() noexcept
{
    install_fork_handlers();
    std::lock_guard<std::mutex> g(g_caches_lock);
    next_cache_ = g_caches_list;
    g_caches_list = this;
}

int Cache::create(const struct vmt_cache_opts *opts, bool merge, Cache **out)
{
    Cache *c = new (std::nothrow) Cache();
    if (!c)
        return -ENOMEM;
    c->configure(opts, merge);
    c->memo_ = static_cast<MemoSlot *>(map_memo(true));
    c->memo_populated_.store(true, std::memory_order_relaxed);
    // The lanes exist before the tracker starts: its events go to all of them.
    unsigned lanes = lanes_for(c->max_entries_, c->max_bytes_);
    int rc = c->memo_ ? (lanes > 1 ? c->add_lanes(lanes, opts, merge) : 0) : -ENOMEM;
    const char *name = opts ? opts->tracker : nullptr;
    if (rc == 0) {
        rc = select_tracker(name, c, &c->own_tracker_, &c->tracker_report_);
        if (rc < 0)
            VMT_LOG_INFO("cannot create a cache with tracker \"%s\": %s", name ? name : "auto",
                         c->tracker_report_.c_str());
    }
    if (rc < 0) {
        delete c;
        return rc;
    }
    for (unsigned slot = 0; slot < kFastStatCaches; slot++) {
        unsigned used = g_stat_slots.load();
        if (!(used & (1u << slot)) && g_stat_slots.compare_exchange_strong(used, used | (1u << slot))) {
            hits_clear_slot(slot);
            c->stat_slot_ = slot;
            break;
        }
    }
    for (unsigned i = 0; i < c->nlanes_; i++)
        c->lanes_[i]->adopt_tracker(c);
    // Newest first in the list: in lane order there, as pause_hits takes their locks.
    for (unsigned i = c->nlanes_; i-- > 0;)
        c->lanes_[i]->join_cache_list();
    VMT_LOG_INFO("cache %p: tracker %s, max %zu entries, %zu bytes, %u lane%s", (void *)c,
                 c->tracker_->name(), c->max_entries_, c->max_bytes_, c->nlanes_,
                 c->nlanes_ == 1 ? "" : "s");
    *out = c;
    return 0;
}

Cache::~Cache()
{
    {
        std::lock_guard<std::mutex> g(g_caches_lock);
        for (Cache **p = &g_caches_list; *p; p = &(*p)->next_cache_)
            if (*p == this) {
                *p = next_cache_;
                break;
            }
    }
    // The head has emptied its lanes (destroy_lanes) and stopped the tracker before it
    // deletes them; a head whose creation failed half way has nothing cached.
    if (head_ == this && tracker_) {
        flush();
        for (Device *d = devices_; d; d = d->next)
            if (!d->detached.load() && !d->forked_away) {
                d->attach_count = 1;
                detach(d);
            }
        for (unsigned i = 0; i < nlanes_; i++)
            lanes_[i]->reclaim();
        // Events stop here: the tracker may call back into this cache until it is gone.
        own_tracker_.reset();
    }
    if (head_ == this) {
        destroy_lanes();
        free_change_log();  // the tracker, which wrote it, is gone
    }
    while (devices_) {
        Device *d = devices_;
        devices_ = d->next;
        delete d;
    }
    if (head_ == this && stat_slot_ < kFastStatCaches)
        g_stat_slots.fetch_and(~(1u << stat_slot_));
    if (memo_)
        munmap(memo_, kMemoSlots * sizeof(MemoSlot));
    pthread_rwlock_destroy(&subs_lock_);
}

// How many of a soft-limited device's evictions wait for each other (Device::soft_batch):
// one reclaim for several saves its fixed cost (the reclaim lock, the reader check's fence,
// a lock turn) at every miss past the limit, and the device holds at most a 32nd of its
// max_regions more, kSoftBatchMax (cache.h) at most. A byte limit (max_bytes) keeps the
// evictions at once: a few large registrations past it may be what the limit is there to
// prevent.
constexpr size_t kSoftBatchShare = 32;

static size_t soft_batch_for(const struct vmt_device_ops &ops)
{
    if (!(ops.flags & VMT_DEVICE_SOFT_LIMITS) || ops.max_bytes)
        return 1;
    return std::max<size_t>(1, std::min(kSoftBatchMax, ops.max_regions / kSoftBatchShare));
}

int Cache::attach(const struct vmt_device_ops *ops, void *ctx, Device **out)
{
    if (!ops || !out || ops->sz < offsetof(struct vmt_device_ops, max_regions) || !ops->reg ||
        !ops->dereg) {
        VMT_LOG_ERROR("vmt_device_attach: ops must be set, with sz, reg and dereg");
        return -EINVAL;
    }
    maybe_after_fork();
    Device *fresh = new (std::nothrow) Device();  // before lock_: malloc may unmap
    if (!fresh)
        return -ENOMEM;
    std::unique_lock<SpinLock> g(lock_);
    for (Device *d = devices_; d; d = d->next) {
        if (d->ops.reg == ops->reg && d->ctx == ctx && !d->detached.load() && !d->forked_away) {
            d->attach_count++;
            g.unlock();
            delete fresh;
            *out = d;
            return 0;
        }
    }
    fresh->cache = this;
    fresh->memo = memo_;
    fresh->memo_live = memo_live_;
    fresh->check_words = words_ != always_valid_;
    if (stat_slot_ < kFastStatCaches)
        fresh->hits_offset = (uint32_t)(offsetof(ThreadRecord, hits) + stat_slot_ * sizeof(uint64_t));
    // Devices past kMaxMemoDevices (in one cache's life), and those of caches past the first
    // kFastStatCaches (whose hits are counted in a shared counter), are served by the tree.
    if (caching_ && stat_slot_ < kFastStatCaches && next_memo_device_ <= kMaxMemoDevices)
        fresh->memo_tag.store(next_memo_device_++ << kMemoTagShift);
    memcpy(&fresh->ops, ops, ops->sz < sizeof fresh->ops ? ops->sz : sizeof fresh->ops);
    fresh->ops.sz = sizeof fresh->ops;
    fresh->ctx = ctx;
    fresh->soft_batch = soft_batch_for(fresh->ops);
    fresh->attach_count = 1;
    fresh->next = devices_;
    devices_ = fresh;
    g.unlock();
    fresh->name = ops->name ? ops->name : "device";
    if (nlanes_ > 1 && caching_ && !device_has_limits(fresh) && attach_lane_twins(fresh) < 0) {
        detach(fresh);
        return -ENOMEM;
    }
    *out = fresh;
    return 0;
}

void Cache::detach(Device *dev)
{
    {
        std::lock_guard<SpinLock> g(lock_);
        if (dev->detached.load() || dev->forked_away) {
            misuse("vmt_device_detach(%p): the device is already detached", (void *)dev);
            return;
        }
        if (--dev->attach_count > 0)
            return;
        write_begin();
        dev->detached.store(true);
        dev->memo_tag.store(kNoMemo);
        retire_all_of(dev);
        write_end();
    }
    reclaim();
    // The device goes away now: what is still held is deregistered anyway (its holders will be
    // told at their vmt_put), since the device may be destroyed right after this returns.
    size_t held = deregister_held(dev);
    if (held)
        VMT_LOG_WARN("vmt_device_detach(%s): %zu registrations were still held; they were "
                     "deregistered now and a later vmt_put of them is an error",
                     dev->name.c_str(), held);
    if (dev->laned)
        detach_lane_twins(dev);
}

}  // namespace vmt
