#include "config.h"
#include "cache/cache.h"

#include <sched.h>
#include <sys/mman.h>
#include <sys/resource.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <new>

#include "util/log.h"
#include "trackers/select.h"

namespace vmt {

namespace {

constexpr size_t kDefaultMaxEntries = 262144;
constexpr int kMaxRegWalk = 16;        // registrations looked at per entry on a hit
constexpr int kHitSpins = 64;          // sequence retries before a hit falls back to the miss path
constexpr int kMissAttempts = 8;       // a miss raced by invalidations this often is served uncached

std::mutex g_caches_lock;
Cache *g_caches_list = nullptr;
std::atomic<unsigned> g_stat_slots{0};
pthread_once_t g_atfork_once = PTHREAD_ONCE_INIT;

// Initial-exec, like t_record: every unmap the hooks see reads t_paused, and the default model
// in a shared library costs a __tls_get_addr call per use.
__thread bool t_in_reclaim __attribute__((tls_model("initial-exec"))) = false;
__thread Cache *t_paused __attribute__((tls_model("initial-exec"))) = nullptr;

// Registrations are in base pages; on x86-64 Linux these are always 4 KiB.
constexpr uintptr_t kPageSize = 4096;
constexpr uintptr_t page_size() { return kPageSize; }

inline void cpu_relax() { __builtin_ia32_pause(); }

// Whether every page of [a0, a1) is mapped; msync(MS_ASYNC) checks the VMAs without faulting
// or writing anything back.
bool range_mapped(uintptr_t a0, uintptr_t a1)
{
    return msync(reinterpret_cast<void *>(a0), a1 - a0, MS_ASYNC) == 0;
}

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
void *map_memo()
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
    return reinterpret_cast<void *>(aligned);
}

void fork_prepare() { Cache::prepare_fork(); }
void fork_parent() { Cache::parent_after_fork(); }
void fork_child() { Cache::child_after_fork(); }
void install_atfork() { pthread_atfork(fork_prepare, fork_parent, fork_child); }

inline bool tick_after(uint32_t a, uint32_t b) { return (int32_t)(a - b) > 0; }

// The end of [start, start+len), saturated at the top of the address space.
inline uintptr_t range_end(uintptr_t start, size_t len)
{
    return start + len < start ? UINTPTR_MAX : start + len;
}

}  // namespace

// ---------------------------------------------------------------------------------------------
// creation

int Cache::create(const struct vmt_cache_opts *opts, bool merge, Cache **out)
{
    Cache *c = new (std::nothrow) Cache();
    if (!c)
        return -ENOMEM;
    const char *name = opts ? opts->tracker : nullptr;
    int rc = select_tracker(name, c, &c->tracker_, &c->tracker_report_);
    if (rc < 0) {
        VMT_LOG_INFO("cannot create a cache with tracker \"%s\": %s", name ? name : "auto",
                      c->tracker_report_.c_str());
        delete c;
        return rc;
    }
    void *memo = map_memo();
    if (!memo) {
        delete c;
        return -ENOMEM;
    }
    c->memo_ = static_cast<MemoSlot *>(memo);
    c->words_ = c->tracker_->words();
    c->always_valid_ = Tracker::always_valid_words();
    c->caching_ = c->tracker_->caches();
    c->merge_ = merge && !(opts && (opts->flags & VMT_CACHE_NO_MERGE));
    c->max_entries_ = opts && opts->max_entries ? opts->max_entries : kDefaultMaxEntries;
    c->max_bytes_ = opts && opts->max_bytes ? opts->max_bytes : default_max_bytes();

    for (unsigned slot = 0; slot < kFastStatCaches; slot++) {
        unsigned used = g_stat_slots.load();
        if (!(used & (1u << slot)) && g_stat_slots.compare_exchange_strong(used, used | (1u << slot))) {
            hits_clear_slot(slot);
            c->stat_slot_ = slot;
            break;
        }
    }
    pthread_once(&g_atfork_once, install_atfork);
    {
        std::lock_guard<std::mutex> g(g_caches_lock);
        c->next_cache_ = g_caches_list;
        g_caches_list = c;
    }
    VMT_LOG_INFO("cache %p: tracker %s, max %zu entries, %zu bytes", (void *)c, c->tracker_->name(),
                 c->max_entries_, c->max_bytes_);
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
    if (!tracker_) {  // creation failed half way
        pthread_rwlock_destroy(&subs_lock_);
        return;
    }
    flush();
    for (Device *d = devices_; d; d = d->next)
        if (!d->detached.load() && !d->forked_away) {
            d->attach_count = 1;
            detach(d);
        }
    reclaim();
    // Events stop here: the tracker may call back into this cache until it is gone.
    tracker_.reset();
    while (devices_) {
        Device *d = devices_;
        devices_ = d->next;
        delete d;
    }
    if (stat_slot_ < kFastStatCaches)
        g_stat_slots.fetch_and(~(1u << stat_slot_));
    if (memo_)
        munmap(memo_, kMemoSlots * sizeof(MemoSlot));
    pthread_rwlock_destroy(&subs_lock_);
}

size_t Cache::bytes_reserved() const noexcept
{
    return index_.bytes() + entries_.bytes_reserved() + regs_.bytes_reserved();
}

// ---------------------------------------------------------------------------------------------
// devices

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
    std::unique_lock<std::mutex> g(lock_);
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
    fresh->attach_count = 1;
    fresh->next = devices_;
    devices_ = fresh;
    g.unlock();
    fresh->name = ops->name ? ops->name : "device";
    *out = fresh;
    return 0;
}

void Cache::detach(Device *dev)
{
    {
        std::lock_guard<std::mutex> g(lock_);
        if (dev->detached.load() || dev->forked_away) {
            misuse("vmt_device_detach(%p): the device is already detached", (void *)dev);
            return;
        }
        if (--dev->attach_count > 0)
            return;
        write_begin();
        dev->detached.store(true);
        dev->memo_tag.store(kNoMemo);
        for (Entry *e = lru_head_, *next; e; e = next) {
            next = e->lru_next;
            Reg *keep = nullptr, *r = e->regs.load(std::memory_order_relaxed);
            Reg **tail = &keep;
            while (r) {
                Reg *rn = r->next.load(std::memory_order_relaxed);
                if (r->dev.load(std::memory_order_relaxed) == dev) {
                    retire(r);
                } else {
                    r->next.store(nullptr, std::memory_order_relaxed);
                    *tail = r;
                    tail = reinterpret_cast<Reg **>(&r->next);
                }
                r = rn;
            }
            e->regs.store(keep, std::memory_order_release);
            if (!keep)
                remove_entry(e);
        }
        write_end();
    }
    reclaim();
    // The device goes away now: what is still held is deregistered anyway (its holders will be
    // told at their vmt_put), since the device may be destroyed right after this returns.
    size_t held = 0;
    std::lock_guard<std::mutex> rl(reclaim_lock_);
    for (;;) {
        Reg *victim = nullptr;
        {
            std::lock_guard<std::mutex> g(lock_);
            for (Reg *r = limbo_; r; r = r->next.load(std::memory_order_relaxed))
                if (r->dev.load(std::memory_order_relaxed) == dev &&
                    reg_state(r) == kRegRetired) {
                    victim = r;
                    break;
                }
            if (victim)
                reg_set_state(victim, kRegDead);
        }
        if (!victim)
            break;
        held++;
        dev->ops.dereg(dev->ctx, victim->handle.load(std::memory_order_relaxed));
        deregistrations_.fetch_add(1, std::memory_order_relaxed);
        Entry *e = victim->entry.load(std::memory_order_relaxed);
        bytes_registered_.fetch_sub(e->end.load() - e->start.load(), std::memory_order_relaxed);
    }
    if (held)
        VMT_LOG_WARN("vmt_device_detach(%s): %zu registrations were still held; they were "
                     "deregistered now and a later vmt_put of them is an error",
                     dev->name.c_str(), held);
}

// ---------------------------------------------------------------------------------------------
// the hit path

void Cache::take_hold(ThreadRecord *t, Reg *r) noexcept
{
    if (!hold_add(t, hold_key(r)))
        r->shared_holds.fetch_add(1, std::memory_order_relaxed);
}

namespace {
// The first slot of the two-slot set for a memo tag.
inline size_t memo_set(uint64_t tag)
{
    return (size_t)((tag * 0x9E3779B97F4A7C15ull) >> 50) * 2;
}
}  // namespace

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

// A hit through the memo: one slot, no tree walk, nothing shared written. Everything that
// makes a device or a cache unfit for it (detached, forked away, not caching) is folded into
// the device's memo tag, so that it costs nothing here. The result is the registration
// (its address), or kMemoMiss, or, for cases that get_rare takes over: kMemoProbe (look at
// both ways of the set, or the hold's home slot is taken) and registration | kMemoBackout (a
// retirement raced the hit: the hold must be taken back). This function looks at both ways
// and probes for a hold slot; vmt_get has the first-way, home-slot case written out, so that
// its common path is a leaf.
constexpr uintptr_t kMemoMiss = 0, kMemoProbe = 2, kMemoBackout = 1;

uintptr_t Cache::memo_lookup_probing(Device *dev, uintptr_t addr, uintptr_t end, unsigned access,
                                     ThreadRecord *t) noexcept
{
    uint64_t dev_tag = dev->memo_tag.load(std::memory_order_relaxed);
    if (dev_tag == kNoMemo)
        return kMemoMiss;  // not memoized (and maybe no per-thread hit counter)
    uint64_t tag = (addr >> 12) | dev_tag;
    uint64_t epoch = epoch_.load(std::memory_order_acquire);
    const MemoSlot *m = &memo_[memo_set(tag)];
    if (m->tag.load(std::memory_order_relaxed) != tag)
        m++;
    std::atomic_thread_fence(std::memory_order_acquire);
    uint64_t stamp = m->stamp.load(std::memory_order_acquire);
    if ((uint32_t)stamp != (uint32_t)epoch || m->tag.load(std::memory_order_relaxed) != tag ||
        m->end.load(std::memory_order_relaxed) < end ||
        (access & m->denied.load(std::memory_order_relaxed)))
        return kMemoMiss;
    if (words_ != always_valid_ &&
        words_[m->watch_handle.load(std::memory_order_relaxed)].load(std::memory_order_acquire) !=
            m->watch_expect.load(std::memory_order_relaxed))
        return kMemoMiss;  // the tracker says the pages changed (or a torn read: see below)
    HoldKey key = slot_id(m->hold.load(std::memory_order_relaxed));  // the registration
    std::atomic_thread_fence(std::memory_order_acquire);
    if (m->stamp.load(std::memory_order_relaxed) != stamp)
        return kMemoMiss;
    if (!hold_add(t, key))
        return kMemoMiss;  // no free slot: the tree path takes the shared counter
    std::atomic_signal_fence(std::memory_order_seq_cst);  // see holds.h
    if (epoch_.load(std::memory_order_acquire) != epoch)
        return key | kMemoBackout;
    count_memo_hit(t->hits[stat_slot_], m);
    return key;
}

// Only caches with a per-thread hit counter use the memo (see attach).
inline void Cache::count_memo_hit(std::atomic<uint64_t> &hits, const MemoSlot *m) noexcept
{
#if defined(__x86_64__)
    // Only this thread writes its counter; other threads read it (stats). One add to memory
    // is a single-copy-atomic write on x86-64, and one instruction instead of three.
    uint64_t *raw = reinterpret_cast<uint64_t *>(&hits);
    asm volatile("addq $1, %0" : "+m"(*raw));
    bool sample = (hits.load(std::memory_order_relaxed) & 15) == 0;
#else
    uint64_t h = hits.load(std::memory_order_relaxed) + 1;
    hits.store(h, std::memory_order_relaxed);
    bool sample = (h & 15) == 0;
#endif
    // Recency for LRU, sampled so that steady hits do not touch the entry's line. The entry is
    // read outside the stamp check: it is only a hint, and entries are never unmapped, so at
    // worst another entry looks recently used.
    if (__builtin_expect(sample, 0)) {
        Entry *e = m->entry.load(std::memory_order_relaxed);
        uint32_t tick = tick_.load(std::memory_order_relaxed);
        if (e && e->last_use.load(std::memory_order_relaxed) != tick)
            e->last_use.store(tick, std::memory_order_relaxed);
    }
}

void Cache::memo_fill(uint64_t epoch, Device *dev, uintptr_t addr, Entry *e, Reg *r) noexcept
{
    uint64_t dev_tag = dev->memo_tag.load(std::memory_order_relaxed);
    uintptr_t page = addr >> 12;
    // Page 0 is never memoized, so that vmt_get(NULL, ...) cannot hit.
    if (dev_tag == kNoMemo || page == 0 || (epoch & 1) ||
        g_readers_fence.load(std::memory_order_relaxed))
        return;
    uint64_t tag = page | dev_tag;
    // Of the set's two slots, take the one already holding this tag, else one that is stale,
    // else the second (the first keeps the older, still valid page).
    MemoSlot *set = &memo_[memo_set(tag)];
    int way = 1;
    for (int w = 0; w < 2; w++)
        if (set[w].tag.load(std::memory_order_relaxed) == tag ||
            (uint32_t)set[w].stamp.load(std::memory_order_relaxed) != (uint32_t)epoch) {
            way = w;
            break;
        }
    MemoSlot &m = set[way];
    uint64_t old = m.stamp.load(std::memory_order_relaxed);
    if (old & 1)
        return;  // another thread is filling it
    uint64_t writing = (((old >> 32) + 1) << 32) | (uint32_t)epoch | 1;
    if (!m.stamp.compare_exchange_strong(old, writing, std::memory_order_acq_rel))
        return;
    // The epoch read before the lookup must still be the current one, all 64 bits of it: a
    // filler stopped for 2^31 retirements must not bring back a slot from before the wrap.
    if (epoch_.load(std::memory_order_seq_cst) != epoch) {
        m.stamp.compare_exchange_strong(writing, writing & ~0xffffffffull, std::memory_order_release);
        return;
    }
    std::atomic_thread_fence(std::memory_order_release);
    m.tag.store(tag, std::memory_order_relaxed);
    m.hold.store(make_slot(hold_key(r), 1), std::memory_order_relaxed);
    m.entry.store(e, std::memory_order_relaxed);
    m.end.store(e->end.load(std::memory_order_relaxed), std::memory_order_relaxed);
    m.denied.store(~reg_access(r), std::memory_order_relaxed);
    m.watch_handle.store(e->watch_handle.load(std::memory_order_relaxed), std::memory_order_relaxed);
    m.watch_expect.store(e->watch_expect.load(std::memory_order_relaxed), std::memory_order_relaxed);
    // Fails (and leaves the slot invalid) if clear_memo went over it meanwhile.
    m.stamp.compare_exchange_strong(writing, writing & ~1ull, std::memory_order_release);
}

// Under lock_. Memo slots filled before this moment stop being valid.
void Cache::move_epoch() noexcept
{
    uint64_t next = epoch_.load(std::memory_order_relaxed) + 2;
    if ((uint32_t)next == 0) {
        // The low half wraps: slots from 2^31 retirements ago would look valid again. Close
        // the memo (an odd epoch matches no slot), invalidate every slot, then reopen.
        epoch_.store(next - 1, std::memory_order_seq_cst);
        clear_memo();
        next += 2;
        memo_wraps_.fetch_add(1, std::memory_order_relaxed);
    }
    epoch_.store(next, std::memory_order_release);
}

void Cache::clear_memo() noexcept
{
    for (size_t i = 0; i < kMemoSlots; i++) {
        uint64_t s = memo_[i].stamp.load(std::memory_order_relaxed);
        // A new fill count and epoch 0 (never valid); a filler in progress fails to publish.
        while (!memo_[i].stamp.compare_exchange_weak(s, ((s >> 32) + 1) << 32,
                                                     std::memory_order_acq_rel)) {
        }
    }
}

// The hit through the tree, under the sequence count; fills the memo for next time.
bool Cache::hit(Device *dev, uintptr_t addr, uintptr_t end, unsigned access, ThreadRecord *t,
                Reg **out) noexcept
{
    for (int spin = 0; spin < kHitSpins; spin++) {
        uint64_t epoch = epoch_.load(std::memory_order_acquire);
        uint64_t s = seq_.load(std::memory_order_acquire);
        if (s & 1) {
            cpu_relax();
            continue;
        }
        Entry *e = static_cast<Entry *>(index_.floor(addr));
        if (e && e->end.load(std::memory_order_relaxed) < end)
            e = nullptr;
        Reg *r = nullptr;
        if (e) {
            r = e->regs.load(std::memory_order_acquire);
            for (int n = 0; r && n < kMaxRegWalk; n++, r = r->next.load(std::memory_order_relaxed))
                if (r->dev.load(std::memory_order_relaxed) == dev && (reg_access(r) & access) == access)
                    break;
            if (r && words_[e->watch_handle.load(std::memory_order_relaxed)].load(std::memory_order_acquire) !=
                         e->watch_expect.load(std::memory_order_relaxed))
                r = nullptr;  // the tracker says the pages changed: the miss path drops it
        }
        if (!r) {
            std::atomic_thread_fence(std::memory_order_acquire);
            if (seq_.load(std::memory_order_acquire) != s)
                continue;
            return false;
        }
        HoldKey key = hold_key(r);
        bool shared = !hold_add(t, key);
        if (shared)
            r->shared_holds.fetch_add(1, std::memory_order_relaxed);
        publish_fence();
        if (seq_.load(std::memory_order_acquire) != s) {
            if (shared)
                r->shared_holds.fetch_sub(1, std::memory_order_relaxed);
            else
                hold_remove(t, key);
            if (reg_state(r) != kRegLive)
                reclaim();
            continue;
        }
        memo_fill(epoch, dev, addr, e, r);
        uint32_t tick = tick_.load(std::memory_order_relaxed);
        if (e->last_use.load(std::memory_order_relaxed) != tick)
            e->last_use.store(tick, std::memory_order_relaxed);
        if (stat_slot_ < kFastStatCaches)
            t->tree_hits[stat_slot_].store(t->tree_hits[stat_slot_].load(std::memory_order_relaxed) + 1,
                                           std::memory_order_relaxed);
        else
            hits_shared_.fetch_add(1, std::memory_order_relaxed);
        *out = r;
        return true;
    }
    return false;
}

int Cache::get(Device *dev, const void *addr, size_t len, unsigned access, Reg **out)
{
    uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    if (__builtin_expect(!addr || !len || !out || (access & ~VMT_ACCESS_ALL) || a + len < a, 0)) {
        VMT_LOG_DEBUG("vmt_get(%p, %zu, 0x%x): invalid argument", addr, len, access);
        return -EINVAL;
    }
    if (__builtin_expect(needs_fork_fixup_.load(std::memory_order_relaxed), 0))
        maybe_after_fork();
    if (__builtin_expect(dev->forked_away, 0)) {
        // Documented behaviour, not misuse: a child starts with no devices.
        VMT_LOG_ERROR("vmt_get: device %p (%s) was attached in the parent process; attach it "
                      "again after fork()", (void *)dev, dev->name.c_str());
        return -ENODEV;
    }
    if (__builtin_expect(dev->detached.load(std::memory_order_relaxed), 0)) {
        misuse("vmt_get: device %p (%s) is detached", (void *)dev, dev->name.c_str());
        return -ENODEV;
    }
    uintptr_t end = a + len;
    uintptr_t a0 = a & ~(page_size() - 1);
    uintptr_t a1 = (end + page_size() - 1) & ~(page_size() - 1);
    if (a1 < end)
        return -EINVAL;
    if (!caching_)
        return get_uncached(dev, a0, a1, access, out);
    ThreadRecord *t = thread_record();
    if (!t)
        return -ENOMEM;
    // vmt_get has already tried the memo (or had no thread record yet): the tree is next.
    if (hit(dev, a, end, access, t, out))
        return 0;
    return miss(dev, a0, a1, access, out);
}

// ---------------------------------------------------------------------------------------------
// the miss path

Entry *Cache::containing(uintptr_t a0, uintptr_t a1) const noexcept
{
    Entry *e = static_cast<Entry *>(index_.floor_w(a0));
    return e && e->end.load(std::memory_order_relaxed) >= a1 ? e : nullptr;
}

bool Cache::unmap_in_flight(uintptr_t a0, uintptr_t a1) const noexcept
{
    for (int i = 0; i < unmaps_count_; i++)
        if (unmaps_[i].start < a1 && unmaps_[i].end > a0)
            return true;
    return false;
}

bool Cache::invalidated_since(uint64_t mark, uintptr_t a0, uintptr_t a1) const noexcept
{
    if (inval_count_ - mark > kInvalLog)
        return true;  // the log wrapped: assume the worst
    for (uint64_t i = mark; i < inval_count_; i++) {
        const Range &r = inval_log_[i % kInvalLog];
        if (r.start < a1 && r.end > a0)
            return true;
    }
    return false;
}

bool Cache::over_limits(Device *dev, size_t adding) const noexcept
{
    if (entry_count_ > max_entries_ || bytes_cached_ > max_bytes_)
        return true;
    if (dev && dev->ops.max_regions && dev->regions + (adding ? 1 : 0) > dev->ops.max_regions)
        return true;
    return false;
}

int Cache::get_uncached(Device *dev, uintptr_t a0, uintptr_t a1, unsigned access, Reg **out)
{
    if (!range_mapped(a0, a1))
        return -EFAULT;
    if (dev->ops.max_region_bytes && a1 - a0 > dev->ops.max_region_bytes) {
        VMT_LOG_WARN("vmt_get: %zu bytes is more than device %s registers at once (%zu)",
                     (size_t)(a1 - a0), dev->name.c_str(), dev->ops.max_region_bytes);
        return -ENOSPC;
    }
    void *handle = nullptr;
    int rc = dev->ops.reg(dev->ctx, reinterpret_cast<void *>(a0), a1 - a0, access, &handle);
    if (rc == -ENOMEM || rc == -ENOSPC) {
        {
            std::lock_guard<std::mutex> g(lock_);
            write_begin();
            evict_locked(dev, nullptr, 1);
            write_end();
        }
        reclaim();
        retries_.fetch_add(1, std::memory_order_relaxed);
        rc = dev->ops.reg(dev->ctx, reinterpret_cast<void *>(a0), a1 - a0, access, &handle);
    }
    if (rc > 0)
        rc = -EIO;  // a device that returns a positive value broke its contract
    if (rc < 0)
        return rc;
    Entry *e = entries_.alloc();
    Reg *r = regs_.alloc();
    if (!e || !r) {
        dev->ops.dereg(dev->ctx, handle);
        if (e)
            entries_.free(e);
        if (r)
            regs_.free(r);
        return -ENOMEM;
    }
    e->start.store(a0);
    e->end.store(a1);
    e->regs.store(r);
    e->in_index = false;
    e->watched = false;
    e->regs_alive = 1;
    r->entry.store(e);
    r->dev.store(dev);
    r->handle.store(handle);
    r->next.store(nullptr);
    r->shared_holds.store(1);
    r->bits.store(access | kRegUncached << 8, std::memory_order_release);
    {
        std::lock_guard<std::mutex> g(lock_);
        dev->regions++;
        dev->bytes += a1 - a0;
    }
    registrations_.fetch_add(1, std::memory_order_relaxed);
    uncached_.fetch_add(1, std::memory_order_relaxed);
    misses_.fetch_add(1, std::memory_order_relaxed);
    bytes_registered_.fetch_add(a1 - a0, std::memory_order_relaxed);
    *out = r;
    return 0;
}

// For the whole of a miss: unmaps that start meanwhile take the locked path, and those that
// started before, without the lock, have ended (see quick_unmaps_).
class Cache::MissInProgress {
public:
    explicit MissInProgress(Cache *c) noexcept : c_(c)
    {
        c_->misses_active_.fetch_add(1, std::memory_order_seq_cst);
        while (c_->quick_unmaps_.load(std::memory_order_seq_cst) != 0)
            sched_yield();  // a system call is in flight: microseconds
    }
    ~MissInProgress() { c_->misses_active_.fetch_sub(1, std::memory_order_seq_cst); }
    MissInProgress(const MissInProgress &) = delete;
    MissInProgress &operator=(const MissInProgress &) = delete;

private:
    Cache *c_;
};

int Cache::miss(Device *dev, uintptr_t a0, uintptr_t a1, unsigned access, Reg **out)
{
    MissInProgress counted(this);
    misses_.fetch_add(1, std::memory_order_relaxed);
    tracker_->poll();
    if (limbo_nonempty_.load(std::memory_order_relaxed))
        reclaim();
    ThreadRecord *t = thread_record();
    if (dev->ops.max_region_bytes && a1 - a0 > dev->ops.max_region_bytes) {
        VMT_LOG_WARN("vmt_get: %zu bytes is more than device %s registers at once (%zu)",
                     (size_t)(a1 - a0), dev->name.c_str(), dev->ops.max_region_bytes);
        return -ENOSPC;
    }
    bool allow_merge = merge_;
    bool retried_device = false;
    for (int attempt = 0; attempt < kMissAttempts; attempt++) {
        // ---- plan, under the lock ----
        uintptr_t u0 = a0, u1 = a1;
        unsigned acc = access;
        Entry *base = nullptr;
        uint64_t mark;
        bool need_evict = false;
        {
            std::unique_lock<std::mutex> g(lock_);
            while (unmap_in_flight(a0, a1))
                wait_for_unmaps(g);
            Entry *e = containing(a0, a1);
            if (e && words_[e->watch_handle.load()].load() == e->watch_expect.load()) {
                for (Reg *r = e->regs.load(); r; r = r->next.load()) {
                    if (r->dev.load() != dev)
                        continue;
                    if ((reg_access(r) & access) == access) {
                        // Another thread registered it meanwhile.
                        take_hold(t, r);
                        *out = r;
                        return 0;
                    }
                    acc |= reg_access(r);  // an upgrade keeps the rights it had
                }
                base = e;
                u0 = e->start.load();
                u1 = e->end.load();
            } else if (allow_merge) {
                // The union keeps the rights this device had on what it absorbs, so that
                // getting one of those ranges again stays a hit.
                unsigned merged_acc = 0;
                auto absorb = [&](Entry *x) {
                    for (Reg *r = x->regs.load(); r; r = r->next.load())
                        if (r->dev.load() == dev)
                            merged_acc |= reg_access(r);
                };
                Entry *p = static_cast<Entry *>(index_.floor_w(a0));
                if (p && p->end.load() >= a0) {
                    u0 = p->start.load(), u1 = p->end.load() > u1 ? p->end.load() : u1;
                    absorb(p);
                }
                for (Entry *n = static_cast<Entry *>(index_.ceil_w(a0)); n && n->start.load() <= u1;
                     n = static_cast<Entry *>(index_.ceil_w(n->start.load() + 1))) {
                    if (n->end.load() > u1)
                        u1 = n->end.load();
                    absorb(n);
                }
                if (dev->ops.max_region_bytes && u1 - u0 > dev->ops.max_region_bytes)
                    u0 = a0, u1 = a1;
                else
                    acc |= merged_acc;
            }
            mark = inval_count_;
            if (!base && over_limits(dev, 1)) {
                write_begin();
                evict_locked(dev, nullptr, 1);
                write_end();
                need_evict = true;
            }
        }
        if (need_evict)
            reclaim();

        // ---- watch, check, register: no lock held ----
        WatchToken tok;
        if (!base) {
            int rc = tracker_->watch(u0, u1 - u0, &tok);
            if (rc == -ENOTSUP)
                return get_uncached(dev, a0, a1, access, out);
            if (rc < 0)
                return rc;
        }
        if (!range_mapped(u0, u1)) {
            if (!base)
                tracker_->unwatch(u0, u1 - u0, tok);
            if (u0 == a0 && u1 == a1)
                return -EFAULT;
            allow_merge = false;  // the union has a hole: register just the request
            continue;
        }
        void *handle = nullptr;
        int rc = dev->ops.reg(dev->ctx, reinterpret_cast<void *>(u0), u1 - u0, acc, &handle);
        if ((rc == -ENOMEM || rc == -ENOSPC) && !retried_device) {
            retried_device = true;
            retries_.fetch_add(1, std::memory_order_relaxed);
            {
                std::lock_guard<std::mutex> g(lock_);
                write_begin();
                evict_locked(dev, base, 1);
                write_end();
            }
            reclaim();
            rc = dev->ops.reg(dev->ctx, reinterpret_cast<void *>(u0), u1 - u0, acc, &handle);
        }
        if (rc > 0)
            rc = -EIO;
        if (rc < 0) {
            if (!base)
                tracker_->unwatch(u0, u1 - u0, tok);
            if (rc == -EFAULT && (u0 < a0 || u1 > a1)) {
                // A neighbour we merged with went away after the mapped check: the request
                // itself may still be fine.
                allow_merge = false;
                continue;
            }
            return rc;
        }
        registrations_.fetch_add(1, std::memory_order_relaxed);
        bytes_registered_.fetch_add(u1 - u0, std::memory_order_relaxed);
        Reg *r = regs_.alloc();
        Entry *ne = base ? nullptr : entries_.alloc();
        bool stale = !r || (!base && !ne);

        // ---- insert, under the lock ----
        std::unique_lock<std::mutex> g(lock_);
        if (!stale) {
            stale = unmap_in_flight(u0, u1) || invalidated_since(mark, u0, u1);
            // base may have been freed and reused meanwhile: it must still be this range.
            if (base)
                stale = stale || !base->in_index || base->start.load() != u0 ||
                        base->end.load() != u1 ||
                        words_[base->watch_handle.load()].load() != base->watch_expect.load();
            else
                stale = stale || words_[tok.handle].load() != tok.expect;
        }
        if (stale) {
            g.unlock();
            dev->ops.dereg(dev->ctx, handle);
            deregistrations_.fetch_add(1, std::memory_order_relaxed);
            bytes_registered_.fetch_sub(u1 - u0, std::memory_order_relaxed);
            if (!base)
                tracker_->unwatch(u0, u1 - u0, tok);
            if (r)
                regs_.free(r);
            if (ne)
                entries_.free(ne);
            if (!r || (!base && !ne))
                return -ENOMEM;
            continue;  // the pages changed while we registered them: start again
        }
        write_begin();
        r->dev.store(dev, std::memory_order_relaxed);
        r->handle.store(handle, std::memory_order_relaxed);
        r->bits.store(acc | kRegLive << 8, std::memory_order_relaxed);
        r->shared_holds.store(0, std::memory_order_relaxed);
        dev->regions++;
        dev->bytes += u1 - u0;
        Entry *target = base;
        if (base) {
            // Upgrade (or a new device on a cached range): the device's old one retires.
            Reg *keep = nullptr, *old = base->regs.load(std::memory_order_relaxed);
            Reg **tail = &keep;
            bool upgraded = false;
            while (old) {
                Reg *on = old->next.load(std::memory_order_relaxed);
                if (old->dev.load(std::memory_order_relaxed) == dev) {
                    retire(old);
                    upgraded = true;
                } else {
                    old->next.store(nullptr, std::memory_order_relaxed);
                    *tail = old;
                    tail = reinterpret_cast<Reg **>(&old->next);
                }
                old = on;
            }
            if (upgraded)
                upgrades_.fetch_add(1, std::memory_order_relaxed);
            r->next.store(keep, std::memory_order_relaxed);
            r->entry.store(base, std::memory_order_relaxed);
            base->regs.store(r, std::memory_order_release);
            base->regs_alive++;
        } else {
            // Everything the new range overlaps (or, merging, touches) leaves the index.
            Entry *p = static_cast<Entry *>(index_.floor_w(u0));
            if (p && (p->end.load() > u0 || (allow_merge && p->end.load() == u0)))
                remove_entry(p);
            for (Entry *n = static_cast<Entry *>(index_.ceil_w(u0));
                 n && (n->start.load() < u1 || (allow_merge && n->start.load() == u1));
                 n = static_cast<Entry *>(index_.ceil_w(u0)))
                remove_entry(n);
            ne->start.store(u0, std::memory_order_relaxed);
            ne->end.store(u1, std::memory_order_relaxed);
            ne->watch_handle.store(tok.handle, std::memory_order_relaxed);
            ne->watch_expect.store(tok.expect, std::memory_order_relaxed);
            ne->last_use.store(0, std::memory_order_relaxed);
            ne->regs_alive = 1;
            ne->watched = true;
            r->next.store(nullptr, std::memory_order_relaxed);
            r->entry.store(ne, std::memory_order_relaxed);
            ne->regs.store(r, std::memory_order_release);
            if (!index_.insert(u0, ne)) {
                // Out of memory for index nodes: serve this one uncached.
                ne->in_index = false;
                reg_set_state(r, kRegUncached);
                r->shared_holds.store(1, std::memory_order_relaxed);
                write_end();
                g.unlock();
                tracker_->unwatch(u0, u1 - u0, tok);
                ne->watched = false;
                uncached_.fetch_add(1, std::memory_order_relaxed);
                *out = r;
                return 0;
            }
            ne->in_index = true;
            ne->lru_stamp = tick_.load(std::memory_order_relaxed);
            lru_push_head(ne);
            entry_count_++;
            bytes_cached_ += u1 - u0;
            tick_.fetch_add(1, std::memory_order_relaxed);
            if (u0 < a0 || u1 > a1)
                merges_.fetch_add(1, std::memory_order_relaxed);
            target = ne;
        }
        if (over_limits(nullptr, 0))
            evict_locked(nullptr, target, 0);
        take_hold(t, r);
        write_end();
        g.unlock();
        if (limbo_nonempty_.load(std::memory_order_relaxed))
            reclaim();
        *out = r;
        return 0;
    }
    // The range keeps changing under us: give the caller a registration that is not cached.
    return get_uncached(dev, a0, a1, access, out);
}

// ---------------------------------------------------------------------------------------------
// index maintenance (lock_ held, inside a write section)

void Cache::lru_push_head(Entry *e) noexcept
{
    e->lru_prev = nullptr;
    e->lru_next = lru_head_;
    if (lru_head_)
        lru_head_->lru_prev = e;
    lru_head_ = e;
    if (!lru_tail_)
        lru_tail_ = e;
}

void Cache::lru_unlink(Entry *e) noexcept
{
    if (e->lru_prev)
        e->lru_prev->lru_next = e->lru_next;
    else
        lru_head_ = e->lru_next;
    if (e->lru_next)
        e->lru_next->lru_prev = e->lru_prev;
    else
        lru_tail_ = e->lru_prev;
    e->lru_prev = e->lru_next = nullptr;
}

void Cache::retire(Reg *r) noexcept
{
    move_epoch();  // memo slots filled before this moment stop being valid (see MemoSlot)
    reg_set_state(r, kRegRetired);
    g_retired_regs.fetch_add(1, std::memory_order_relaxed);
    r->next.store(limbo_, std::memory_order_relaxed);
    limbo_ = r;
    limbo_nonempty_.store(true, std::memory_order_relaxed);
}

void Cache::remove_entry(Entry *e) noexcept
{
    index_.erase(e->start.load(std::memory_order_relaxed));
    e->in_index = false;
    lru_unlink(e);
    entry_count_--;
    bytes_cached_ -= e->end.load(std::memory_order_relaxed) - e->start.load(std::memory_order_relaxed);
    Reg *r = e->regs.load(std::memory_order_relaxed);
    e->regs.store(nullptr, std::memory_order_release);
    while (r) {
        Reg *next = r->next.load(std::memory_order_relaxed);
        retire(r);
        r = next;
    }
}

size_t Cache::evict_locked(Device *for_dev, Entry *keep, size_t want) noexcept
{
    size_t evicted = 0;
    size_t budget = 2 * entry_count_ + 2;
    while (lru_tail_ && budget--) {
        bool need = evicted < want || over_limits(nullptr, 0) ||
                    (for_dev && over_limits(for_dev, 1) && for_dev->regions > 0);
        if (!need)
            break;
        Entry *e = lru_tail_;
        bool has_dev = !for_dev;
        for (Reg *r = e->regs.load(std::memory_order_relaxed); r && !has_dev; r = r->next.load(std::memory_order_relaxed))
            has_dev = r->dev.load(std::memory_order_relaxed) == for_dev;
        bool recently_used = tick_after(e->last_use.load(std::memory_order_relaxed), e->lru_stamp);
        if (e == keep || recently_used || (!has_dev && !over_limits(nullptr, 0))) {
            // Second chance: it was used since it last reached the head.
            lru_unlink(e);
            e->lru_stamp = tick_.fetch_add(1, std::memory_order_relaxed) + 1;
            e->last_use.store(e->lru_stamp, std::memory_order_relaxed);
            lru_push_head(e);
            continue;
        }
        remove_entry(e);
        evictions_.fetch_add(1, std::memory_order_relaxed);
        evicted++;
    }
    return evicted;
}

size_t Cache::invalidate_locked(uintptr_t start, uintptr_t end) noexcept
{
    inval_log_[inval_count_ % kInvalLog] = Range{start, end, 0};
    inval_count_++;
    size_t n = 0;
    if (!index_overlaps(start, end))
        return 0;  // the common case: nothing cached there
    Entry *p = static_cast<Entry *>(index_.floor_w(start));
    bool first_overlaps = p && p->end.load(std::memory_order_relaxed) > start;
    write_begin();
    if (first_overlaps) {
        remove_entry(p);
        n++;
    }
    for (Entry *e = static_cast<Entry *>(index_.ceil_w(start));
         e && e->start.load(std::memory_order_relaxed) < end;
         e = static_cast<Entry *>(index_.ceil_w(start))) {
        remove_entry(e);
        n++;
    }
    write_end();
    return n;
}

// ---------------------------------------------------------------------------------------------
// put and reclaim

// Slow half of vmt_put: the hold is not in this thread's slots (a put from another thread than
// the get, a hold that went to the shared counter, or one put too many), or some registration
// of the process is retired and this one may be it.
//
// hold_released: vmt_put already took the hold out of this thread's slots. From then on this
// put owns nothing: the registration may be reclaimed and reused at any moment, so its state
// says nothing about this put (only whether a reclaim is due).
void Cache::put(Reg *r, bool hold_released)
{
    Device *dev = r->dev.load(std::memory_order_relaxed);
    if (dev && dev->forked_away)
        return;  // the parent's registration, put in the child: it stays the parent's
    if (hold_released) {
        if (dev && dev->detached.load(std::memory_order_relaxed))
            misuse("vmt_put(%p): its device (%s) was detached before this put", (void *)r,
                   dev->name.c_str());
        if (reg_state(r) != kRegLive)
            reclaim();
        return;
    }
    uint32_t st = reg_state(r);
    if (st == kRegUncached) {
        int32_t left = r->shared_holds.fetch_sub(1, std::memory_order_acq_rel) - 1;
        if (left < 0) {
            r->shared_holds.fetch_add(1, std::memory_order_relaxed);
            misuse("vmt_put(%p): released more times than it was taken (double vmt_put?)", (void *)r);
            return;
        }
        if (left > 0)
            return;
        Entry *e = r->entry.load(std::memory_order_relaxed);
        size_t len = e->end.load() - e->start.load();
        dev->ops.dereg(dev->ctx, r->handle.load(std::memory_order_relaxed));
        deregistrations_.fetch_add(1, std::memory_order_relaxed);
        bytes_registered_.fetch_sub(len, std::memory_order_relaxed);
        {
            std::lock_guard<std::mutex> g(lock_);
            dev->regions--;
            dev->bytes -= len;
        }
        reg_set_state(r, kRegDead);
        regs_.free(r);
        entries_.free(e);
        return;
    }
    // Not in this thread's slots: a put by another thread, or once too often.
    int64_t held = r->shared_holds.load(std::memory_order_acquire) + holds_in_threads(hold_key(r));
    if (held <= 0) {
        misuse("vmt_put(%p): released more times than it was taken (double vmt_put?)", (void *)r);
        return;
    }
    if (st == kRegDead)  // still held by us, so this state is real: detach came first
        misuse("vmt_put(%p): its device (%s) was detached before this put", (void *)r,
               dev ? dev->name.c_str() : "?");
    r->shared_holds.fetch_sub(1, std::memory_order_acq_rel);
    publish_fence();
    if (reg_state(r) != kRegLive)
        reclaim();
}

void Cache::reclaim() noexcept
{
    if (t_in_reclaim || !limbo_nonempty_.load(std::memory_order_acquire))
        return;
    t_in_reclaim = true;
    std::lock_guard<std::mutex> rl(reclaim_lock_);
    Reg *list;
    {
        std::lock_guard<std::mutex> g(lock_);
        list = limbo_;
        limbo_ = nullptr;
        limbo_nonempty_.store(false, std::memory_order_relaxed);
    }
    if (!list) {
        t_in_reclaim = false;
        return;
    }
    reader_barrier();
    Reg *keep = nullptr, *done = nullptr;
    while (list) {
        Reg *r = list;
        list = r->next.load(std::memory_order_relaxed);
        int64_t held = r->shared_holds.load(std::memory_order_acquire) + holds_in_threads(hold_key(r));
        if (held > 0) {
            if (!(r->bits.load(std::memory_order_relaxed) & kBitsDeferred)) {
                r->bits.fetch_or(kBitsDeferred, std::memory_order_relaxed);
                deferred_.fetch_add(1, std::memory_order_relaxed);
            }
            r->next.store(keep, std::memory_order_relaxed);
            keep = r;
            continue;
        }
        if (reg_state(r) != kRegDead) {
            Device *d = r->dev.load(std::memory_order_relaxed);
            Entry *e = r->entry.load(std::memory_order_relaxed);
            d->ops.dereg(d->ctx, r->handle.load(std::memory_order_relaxed));
            deregistrations_.fetch_add(1, std::memory_order_relaxed);
            bytes_registered_.fetch_sub(e->end.load() - e->start.load(), std::memory_order_relaxed);
        }
        r->next.store(done, std::memory_order_relaxed);
        done = r;
    }
    Entry *unwatch_list[64];
    int nunwatch = 0;
    Entry *free_later = nullptr;
    {
        std::lock_guard<std::mutex> g(lock_);
        while (done) {
            Reg *r = done;
            done = r->next.load(std::memory_order_relaxed);
            Device *d = r->dev.load(std::memory_order_relaxed);
            Entry *e = r->entry.load(std::memory_order_relaxed);
            size_t len = e->end.load() - e->start.load();
            d->regions--;
            d->bytes -= len;
            reg_set_state(r, kRegDead);
            g_retired_regs.fetch_sub(1, std::memory_order_relaxed);
            regs_.free(r);
            if (--e->regs_alive == 0 && !e->in_index) {
                e->lru_next = free_later;  // reuse the link: the entry left the LRU list
                free_later = e;
            }
        }
        while (keep) {
            Reg *r = keep;
            keep = r->next.load(std::memory_order_relaxed);
            r->next.store(limbo_, std::memory_order_relaxed);
            limbo_ = r;
            limbo_nonempty_.store(true, std::memory_order_relaxed);
        }
    }
    // Unwatch outside the lock, then give the entries back.
    while (free_later) {
        nunwatch = 0;
        while (free_later && nunwatch < 64) {
            unwatch_list[nunwatch++] = free_later;
            free_later = free_later->lru_next;
        }
        for (int i = 0; i < nunwatch; i++) {
            Entry *e = unwatch_list[i];
            if (e->watched)
                tracker_->unwatch(e->start.load(), e->end.load() - e->start.load(),
                                  WatchToken{e->watch_handle.load(), e->watch_expect.load()});
            e->watched = false;
            e->lru_next = nullptr;
            entries_.free(e);
        }
    }
    t_in_reclaim = false;
}

// ---------------------------------------------------------------------------------------------
// events

void Cache::notify_subscribers(uintptr_t start, size_t len) noexcept
{
    if (!nsubs_)
        return;
    pthread_rwlock_rdlock(&subs_lock_);
    for (int i = 0; i < nsubs_; i++)
        subs_[i].fn(subs_[i].arg, reinterpret_cast<const void *>(start), len);
    pthread_rwlock_unlock(&subs_lock_);
}

void Cache::invalidate(uintptr_t start, size_t len) noexcept
{
    if (!len)
        return;
    uintptr_t end = range_end(start, len);
    size_t n;
    if (t_paused == this) {
        n = invalidate_locked(start, end);
    } else {
        std::lock_guard<std::mutex> g(lock_);
        n = invalidate_locked(start, end);
    }
    after_invalidation(n, start, len);
}

void Cache::after_invalidation(size_t removed, uintptr_t start, size_t len) noexcept
{
    if (removed)
        invalidations_.fetch_add(removed, std::memory_order_relaxed);
    // Inside pause_hits the index lock is held: subscribers hear of it at resume_hits, so that
    // they may call into vmtrack. A full queue is delivered as it is (rare, and still correct).
    if (t_paused == this && nsubs_ && paused_events_count_ < kMaxPausedEvents) {
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

uint64_t Cache::unmap_begin(uintptr_t start, size_t len) noexcept
{
    if (!len)
        return kLockedUnmap;
    uintptr_t end = range_end(start, len);
    // Subscribers hear of every unmap, and only the locked path tells them.
    if (!nsubs_ && t_paused != this) {
        quick_unmaps_.fetch_add(1, std::memory_order_seq_cst);
        if (misses_active_.load(std::memory_order_seq_cst) == 0 && !maybe_cached(start, end))
            return kQuickUnmap;
        quick_unmaps_.fetch_sub(1, std::memory_order_seq_cst);
    }
    size_t n;
    {
        std::unique_lock<std::mutex> g(lock_);
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

void Cache::unmap_end(uintptr_t start, size_t len, uint64_t token) noexcept
{
    if (!len)
        return;
    if (token == kQuickUnmap) {
        quick_unmaps_.fetch_sub(1, std::memory_order_seq_cst);
        return;
    }
    uintptr_t end = range_end(start, len);
    bool waiters;
    {
        std::lock_guard<std::mutex> g(lock_);
        waiters = unmap_waiters_ != 0;
        for (int i = 0; i < unmaps_count_; i++) {
            if (unmaps_[i].start == start && unmaps_[i].end == end) {
                if (--unmaps_[i].depth == 0)
                    unmaps_[i] = unmaps_[--unmaps_count_];
                break;
            }
        }
        // A registration that started during the unmap must not be inserted: log it again.
        inval_log_[inval_count_ % kInvalLog] = Range{start, end, 0};
        inval_count_++;
    }
    if (waiters)  // most unmaps race nothing: no futex call for them
        unmap_done_.notify_all();
}

void Cache::wait_for_unmaps(std::unique_lock<std::mutex> &g) noexcept
{
    unmap_waiters_++;
    unmap_done_.wait(g);
    unmap_waiters_--;
}

void Cache::pause_hits() noexcept
{
    lock_.lock();
    t_paused = this;
    write_begin();  // stops hits through the tree
    // ...and through the memo: the event being read may be for a range a memo slot holds.
    move_epoch();
}

void Cache::resume_hits() noexcept
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

int Cache::invalidate_manual(uintptr_t start, size_t len)
{
    if (!len || start + len < start)
        return -EINVAL;
    invalidate(start, len);
    reclaim();
    return 0;
}

int Cache::flush()
{
    maybe_after_fork();
    tracker_->poll();
    {
        std::lock_guard<std::mutex> g(lock_);
        if (lru_head_) {
            write_begin();
            while (lru_head_)
                remove_entry(lru_head_);
            write_end();
        }
    }
    reclaim();
    return 0;
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

void Cache::stats(struct vmt_stats *s)
{
    uint64_t hits = hits_shared_.load(), memo_hits = 0;
    if (stat_slot_ < kFastStatCaches) {
        memo_hits = hits_in_threads(stat_slot_, false);
        hits += memo_hits + hits_in_threads(stat_slot_, true);
    }
    struct vmt_stats v;
    memset(&v, 0, sizeof v);
    v.sz = sizeof v;
    v.hits = hits;
    v.misses = misses_.load();
    v.registrations = registrations_.load();
    v.deregistrations = deregistrations_.load();
    v.invalidations = invalidations_.load();
    v.evictions = evictions_.load();
    {
        std::lock_guard<std::mutex> g(lock_);
        v.entries = entry_count_;
    }
    v.bytes_registered = bytes_registered_.load();
    v.uncached = uncached_.load();
    v.merges = merges_.load();
    v.upgrades = upgrades_.load();
    v.retries = retries_.load();
    v.deferred = deferred_.load();
    v.max_entries = max_entries_;
    v.max_bytes = max_bytes_;
    v.memo_hits = memo_hits;
    v.memo_wraps = memo_wraps_.load();
    size_t n = s->sz < sizeof v ? s->sz : sizeof v;
    size_t caller_sz = s->sz;
    memcpy(s, &v, n);
    s->sz = caller_sz;
}

// ---------------------------------------------------------------------------------------------
// fork

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
        // (their objects stay allocated and are never reused here).
        new (&c->lock_) std::mutex();
        new (&c->reclaim_lock_) std::mutex();
        new (&c->fork_fixup_lock_) std::mutex();
        c->write_depth_ = 0;
        new (&c->unmap_done_) std::condition_variable();
        c->unmap_waiters_ = 0;  // the waiting threads were not copied
        c->quick_unmaps_.store(0);  // nor were the unmapping ones
        c->misses_active_.store(0);
        c->entries_.reset_after_fork();
        c->regs_.reset_after_fork();
        c->index_.reset_after_fork();
        memset(static_cast<void *>(c->memo_), 0, kMemoSlots * sizeof(MemoSlot));
        c->seq_.store(0);
        c->lru_head_ = c->lru_tail_ = nullptr;
        c->entry_count_ = 0;
        c->bytes_cached_ = 0;
        c->limbo_ = nullptr;
        c->limbo_nonempty_.store(false);
        c->unmaps_count_ = 0;
        c->inval_count_ = 0;
        for (Device *d = c->devices_; d; d = d->next) {
            d->forked_away = true;
            d->memo_tag.store(kNoMemo);
        }
        for (auto *counter : {&c->hits_shared_, &c->misses_, &c->registrations_, &c->deregistrations_,
                              &c->invalidations_, &c->evictions_, &c->uncached_, &c->merges_,
                              &c->upgrades_, &c->retries_, &c->deferred_, &c->bytes_registered_,
                              &c->memo_wraps_})
            counter->store(0);
        c->needs_fork_fixup_.store(true);
    }
    new (&g_caches_lock) std::mutex();
}

void Cache::maybe_after_fork() noexcept
{
    if (!needs_fork_fixup_.load(std::memory_order_acquire))
        return;
    // Not lock_: the tracker may unmap the parent's state, which comes back here as an event.
    std::lock_guard<std::mutex> g(fork_fixup_lock_);
    if (!needs_fork_fixup_.load())
        return;
    int rc = tracker_->after_fork_child();
    if (rc < 0) {
        VMT_LOG_ERROR("after fork: tracker %s cannot follow the child (%s): caching is off",
                      tracker_->name(), strerror(-rc));
        caching_ = false;
        std::lock_guard<std::mutex> l(lock_);
        for (Device *d = devices_; d; d = d->next)
            d->memo_tag.store(kNoMemo);
    }
    words_ = tracker_->words();
    needs_fork_fixup_.store(false, std::memory_order_release);
}

// The rest of vmt_get: anything but a memo hit.
__attribute__((noinline)) int get_rare(Device *d, const void *addr, size_t len, unsigned access,
                                       struct vmt_reg **out, uintptr_t found)
{
    if (found & kMemoBackout) {
        Reg *r = reinterpret_cast<Reg *>(found & ~kMemoBackout);
        hold_remove(t_record, hold_key(r));
        if (reg_state(r) != kRegLive)
            d->cache->reclaim_now();
    } else if (found == kMemoProbe && t_record) {
        uintptr_t a = reinterpret_cast<uintptr_t>(addr);
        found = d->cache->memo_lookup_probing(d, a, a + len, access, t_record);
        if (found > kMemoProbe && !(found & kMemoBackout)) {
            *out = reinterpret_cast<struct vmt_reg *>(found);
            return 0;
        }
        return get_rare(d, addr, len, access, out, found == kMemoProbe ? kMemoMiss : found);
    }
    return get_full(d, addr, len, access, out);
}

int get_full(Device *d, const void *addr, size_t len, unsigned access, struct vmt_reg **out)
{
    if (__builtin_expect(!d || !out, 0))
        return -EINVAL;
    Reg *r = nullptr;
    int rc = d->cache->get(d, addr, len, access, &r);
    if (__builtin_expect(rc == 0, 1))
        *out = reinterpret_cast<struct vmt_reg *>(r);
    return rc;
}

// The rest of vmt_put. hold_released: the fast path took the hold out of its home slot, and
// some registration is retired (or readers fence themselves).
__attribute__((noinline)) void put_full(struct vmt_reg *reg, bool hold_released)
{
    if (__builtin_expect(!reg, 0)) {
        misuse("vmt_put(NULL)");
        return;
    }
    if (__builtin_expect(hold_key(reg) & kMaxSlotCount, 0)) {
        misuse("vmt_put(%p): not a registration vmt_get returned (misaligned)", (void *)reg);
        return;
    }
    bool released = hold_released;
    if (!released) {
        ThreadRecord *t = thread_record();
        released = t && hold_remove(t, hold_key(reg));
    }
    if (released) {
        publish_fence();
        if (g_retired_regs.load(std::memory_order_acquire) == 0)
            return;
    }
    Reg *r = reinterpret_cast<Reg *>(reg);
    Device *d = r->dev.load(std::memory_order_relaxed);
    if (__builtin_expect(!d, 0)) {
        misuse("vmt_put(%p): not a registration vmt_get returned", (void *)reg);
        return;
    }
    d->cache->put(r, released);
}

}  // namespace vmt

// The C entry points of the hot path live here, next to what they inline.
// The common case first, in as few instructions as possible: Cache::memo_lookup_probing
// flattened, for the first way of the memo set only, with the hold taken in its home slot
// only. Everything else goes to get_rare by a tail call, bad arguments included: len 0 and
// overflow fail `a + len > a`, unknown access bits never match a slot, page 0 is never
// memoized.
extern "C" int vmt_get(struct vmt_device *dev, const void *addr, size_t len, unsigned access,
                       struct vmt_reg **out)
{
    using namespace vmt;
    Device *d = reinterpret_cast<Device *>(dev);
    uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    uintptr_t found = kMemoMiss;
    Cache *c;
    uint64_t tag, epoch, stamp, hold, key;
    const Cache::MemoSlot *m;
    ThreadRecord *t;
    std::atomic<uint64_t> *slot;
    // Where readers must fence (no membarrier), the memo is never filled: no check needed here.
    if (__builtin_expect(!d || !out || a + len <= a, 0))
        goto rare;
    // Only the set's first way: the second (and a busy home slot for the hold) is get_rare's.
    tag = (a >> 12) | d->memo_tag.load(std::memory_order_relaxed);
    m = &static_cast<const Cache::MemoSlot *>(d->memo)[memo_set(tag)];
    c = d->cache;
    epoch = c->epoch_.load(std::memory_order_acquire);
    stamp = m->stamp.load(std::memory_order_acquire);
    if (__builtin_expect((uint32_t)stamp != (uint32_t)epoch ||
                             m->tag.load(std::memory_order_relaxed) != tag, 0)) {
        found = kMemoProbe;
        goto rare;
    }
    // A slot of a's page ends after a: the difference cannot wrap.
    if (m->end.load(std::memory_order_relaxed) - a < len ||
        (access & m->denied.load(std::memory_order_relaxed)))
        goto rare;
    if (d->check_words &&
        c->words_[m->watch_handle.load(std::memory_order_relaxed)].load(std::memory_order_acquire) !=
            m->watch_expect.load(std::memory_order_relaxed))
        goto rare;  // the pages changed, or a torn read (the stamp check below catches that)
    hold = m->hold.load(std::memory_order_relaxed);
    std::atomic_thread_fence(std::memory_order_acquire);
    if (__builtin_expect(m->stamp.load(std::memory_order_relaxed) != stamp, 0))
        goto rare;
    // The hold names the registration (its address) and its home slot.
    t = t_record;
    if (__builtin_expect(!t, 0))
        goto rare;
    key = slot_id(hold);
    slot = &t->slots[slot_home(key)];
    if (__builtin_expect(slot_count(slot->load(std::memory_order_relaxed)) != 0, 0)) {
        found = kMemoProbe;
        goto rare;
    }
    slot->store(hold, std::memory_order_relaxed);
    found = key;
    std::atomic_signal_fence(std::memory_order_seq_cst);  // see holds.h
    if (__builtin_expect(c->epoch_.load(std::memory_order_acquire) != epoch, 0)) {
        found |= kMemoBackout;
        goto rare;
    }
    c->count_memo_hit(
        *reinterpret_cast<std::atomic<uint64_t> *>(reinterpret_cast<char *>(t) + d->hits_offset), m);
    *out = reinterpret_cast<struct vmt_reg *>(found);
    return 0;
rare:
    return get_rare(d, addr, len, access, out, found);
}

extern "C" void vmt_put(struct vmt_reg *reg)
{
    // The common put touches only this thread's record: the hold leaves its home slot and,
    // while no registration of the process is retired, nothing else can need this put.
    vmt::ThreadRecord *t = vmt::t_record;
    vmt::HoldKey key = vmt::hold_key(reg);
    if (__builtin_expect(t != nullptr, 1)) {
        std::atomic<uint64_t> &slot = t->slots[vmt::slot_home(key)];
        uint64_t s = slot.load(std::memory_order_relaxed);
        // A pointer into a registration (not 8-byte aligned) must not match its hold: the
        // shifted low bits make such a key fail the test.
        uint64_t misaligned = key << (64 - vmt::kCountBits);
        if (__builtin_expect(((s - vmt::make_slot(key, 1)) | misaligned) < (uint64_t)vmt::kMaxSlotCount, 1)) {
            slot.store(s - 1, std::memory_order_relaxed);
            // Fencing readers (no membarrier) keep g_retired_regs above 0: they never return here.
            std::atomic_signal_fence(std::memory_order_seq_cst);
            if (__builtin_expect(vmt::g_retired_regs.load(std::memory_order_acquire) == 0, 1))
                return;
            vmt::put_full(reg, true);
            return;
        }
    }
    vmt::put_full(reg, false);
}
