// The hit path: vmt_get and vmt_put, the memo in front of the index, the lock-free walk of the
// index, and what they inline (kept in this one file so that the common hit compiles to a
// leaf function).
//
// Why a hit never hands out a stale registration:
// - A hit through the tree reads the index inside a sequence-count section (seq_ is odd while a
//   writer changes it), publishes its hold in the thread's own record, fences (publish_fence),
//   and checks the sequence again: a retirement either came before its read (the count moved,
//   the hold is taken back) or sees the hold (reclaim waits for it, after reader_barrier).
// - A hit through the memo uses a slot only while the slot's stamp carries the cache's current
//   memo epoch and has not changed since the hit read it. Every retirement invalidates the
//   slots of its entry (or moves the epoch) before the registration can be deregistered
//   (retire() -> forget_memo_of()), so a slot filled before a retirement is never valid after
//   it; a hit that published its hold and then sees the stamp or the epoch moved backs out.
// - Memo and tree both check the tracker's validity word (kmod) for the entry's watch: a word
//   that changed means the pages changed, and the miss path drops the entry.
// - A memo slot is never trusted for the range: its entry must cover the request, and access
//   rights are tested against the registration's (one AND with `denied`).
#include "config.h"
#include "cache/cache.h"

#include <cerrno>

#include "cache/internal.h"
#include "util/log.h"

namespace vmt {

namespace {
constexpr int kMaxRegWalk = 16;  // registrations looked at per entry on a hit

// The first slot of the two-slot set for a memo tag. The multiply alone (Fibonacci hashing)
// spreads consecutive pages perfectly but clusters pages at strides of 16 to 96 pages (buffers
// of 64 to 384 KiB side by side): 4096 regions 128 KiB apart landed in 1869 of the 16384
// sets, and a fifth of their hits walked the tree. Folding the tag's bits 11 and up onto
// its low ones first leaves consecutive pages spread as before and spreads every stride
// from 1 to 16384 pages about as well as random keys would.
inline size_t memo_set(uint64_t tag)
{
    tag ^= tag >> 11;
    return (size_t)((tag * 0x9E3779B97F4A7C15ull) >> 50) * 2;
}

// The number of the set (not its first slot) where the memo keeps dev's page of addr.
inline size_t memo_set_number(const Device *dev, uintptr_t addr)
{
    return memo_set((addr >> 12) | dev->memo_tag.load(std::memory_order_relaxed)) / 2;
}
}  // namespace

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
    if (m->tag.load(std::memory_order_relaxed) != tag) {
        if (m->way1_hint.load(std::memory_order_relaxed) != (uint32_t)tag) {
            // Not in the second way either, most likely: the tree's walk is next, and the
            // fill after it claims a slot of this set (memo_claim), the second way's line
            // wanted then. Asked for now, it comes during the walk.
            __builtin_prefetch(m + 1, 1);
            return kMemoMiss;
        }
        m++;
    }
    std::atomic_thread_fence(std::memory_order_acquire);
    uint64_t stamp = m->stamp.load(std::memory_order_acquire);
    if ((uint32_t)stamp != (uint32_t)epoch || m->tag.load(std::memory_order_relaxed) != tag ||
        m->end.load(std::memory_order_relaxed) < end ||
        (access & m->denied.load(std::memory_order_relaxed)))
        return kMemoMiss;
    if (words_ != always_valid_ && watch_changed(m))
        return kMemoMiss;  // the tracker says the pages changed (or a torn read: see below)
    HoldKey key = slot_id(m->hold.load(std::memory_order_relaxed));  // the registration
    std::atomic_thread_fence(std::memory_order_acquire);
    if (m->stamp.load(std::memory_order_relaxed) != stamp)
        return kMemoMiss;
    if (!hold_add(t, key))
        return kMemoMiss;  // no free slot: the tree path takes the shared counter
    std::atomic_signal_fence(std::memory_order_seq_cst);  // see holds.h
    if (epoch_.load(std::memory_order_acquire) != epoch ||
        m->stamp.load(std::memory_order_acquire) != stamp)
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
        if (e && !e->used.load(std::memory_order_relaxed))
            e->used.store(1, std::memory_order_relaxed);
    }
}

Cache::MemoSlot *Cache::memo_claim(uint64_t epoch, Device *dev, uintptr_t addr, size_t *slot,
                                   uint64_t *writing) noexcept
{
    uint64_t dev_tag = dev->memo_tag.load(std::memory_order_relaxed);
    uintptr_t page = addr >> 12;
    // Page 0 is never memoized, so that vmt_get(NULL, ...) cannot hit.
    if (dev_tag == kNoMemo || page == 0 || (epoch & 1) ||
        g_readers_fence.load(std::memory_order_relaxed))
        return nullptr;
    uint64_t tag = page | dev_tag;
    // Of the set's two slots, take the one already holding this tag, else one that is stale,
    // else the second (the first keeps the older, still valid page).
    size_t first = memo_set(tag);
    MemoSlot *set = &memo_[first];
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
        return nullptr;  // another thread is filling it
    if (way == 1 && set[0].way1_hint.load(std::memory_order_relaxed) != (uint32_t)tag)
        set[0].way1_hint.store((uint32_t)tag, std::memory_order_relaxed);
    *writing = (((old >> 32) + 1) << 32) | (uint32_t)epoch | 1;
    if (!m.stamp.compare_exchange_strong(old, *writing, std::memory_order_seq_cst))
        return nullptr;
    mark_set_live(first / 2);
    *slot = first + (size_t)way;
    return &m;
}

// The slot's fields, after its claim (odd stamp) and before its publish.
void Cache::memo_write(MemoSlot &m, Device *dev, uintptr_t addr, Entry *e, Reg *r) noexcept
{
    std::atomic_thread_fence(std::memory_order_release);
    m.tag.store((addr >> 12) | dev->memo_tag.load(std::memory_order_relaxed),
                std::memory_order_relaxed);
    m.hold.store(make_slot(hold_key(r), 1), std::memory_order_relaxed);
    m.entry.store(e, std::memory_order_relaxed);
    m.end.store(e->end.load(std::memory_order_relaxed), std::memory_order_relaxed);
    m.denied.store(~reg_access(r), std::memory_order_relaxed);
    m.watch_handle.store(e->watch_handle.load(std::memory_order_relaxed), std::memory_order_relaxed);
    m.watch_expect.store(e->watch_expect.load(std::memory_order_relaxed), std::memory_order_relaxed);
    m.handle.store(r->handle.load(std::memory_order_relaxed), std::memory_order_relaxed);
}

void Cache::memo_fill(uint64_t epoch, uint64_t seq, Device *dev, uintptr_t addr, Entry *e,
                      Reg *r) noexcept
{
    size_t slot;
    uint64_t writing;
    MemoSlot *m = memo_claim(epoch, dev, addr, &slot, &writing);
    if (!m)
        return;
    // The entry lists the slot before the sequence count is read again; a retirement, always
    // in a write section, moves the count before it reads the list (forget_memo_of). So
    // either this filler sees the count moved and gives the slot up, or the retirement finds
    // the slot and invalidates it (the publish below then fails). The epoch read before the
    // lookup must still be the current one, all 64 bits of it: a filler stopped for 2^31
    // moves must not bring back a slot from before the wrap.
    note_memo_slot(e, slot);
    if (seq_.load(std::memory_order_seq_cst) != seq ||
        epoch_.load(std::memory_order_seq_cst) != epoch) {
        give_up_slot(*m);
        return;
    }
    memo_write(*m, dev, addr, e, r);
    // Fails if a retirement or clear_memo went over it meanwhile: they leave the slot odd
    // (this filler's still) and invalid, and this filler lets it go.
    if (!m->stamp.compare_exchange_strong(writing, writing & ~1ull, std::memory_order_release))
        give_up_slot(*m);
}

// memo_fill for the entry a miss inserts, under lock_ and inside the write section that
// inserted it: until that section ends no other filler can know the entry (a walk needs an
// even sequence count), and until the lock goes no retirement, epoch move or clear_memo can
// run. So the entry lists its one slot by a plain store, nothing is checked again, and the
// publish is a store: of the four locked instructions a filler makes, only the claim stays
// (a filler of another entry may race for the slot).
void Cache::memo_fill_inserting(Device *dev, uintptr_t addr, Entry *e, Reg *r) noexcept
{
    size_t set = memo_set_number(dev, addr);
    if (!(memo_hit_[set / 64].load(std::memory_order_relaxed) & memo_live_bit(set)))
        return;
    size_t slot;
    uint64_t writing;
    MemoSlot *m = memo_claim(epoch_.load(std::memory_order_relaxed), dev, addr, &slot, &writing);
    if (!m)
        return;
    e->memo_slots.store((uint64_t)slot + 1, std::memory_order_relaxed);
    memo_write(*m, dev, addr, e, r);
    m->stamp.store(writing & ~1ull, std::memory_order_release);
}

// The filler that made the slot's stamp odd is the only one that makes it even again, once it
// has stopped writing the slot's fields. An invalidation that met a filler at work used to
// make the stamp even (and invalid) at once: a second filler could then take the slot and
// write its fields while the first was still writing its own, and publish a slot with one
// page's tag and another range's registration, which a hit then handed out (test_cache_threads
// under TSan, a few runs in a hundred with two running at once). So an invalidation keeps the
// stamp odd (and its epoch half 0), and the filler, whose publish then fails, ends it here:
// even, a new fill count, epoch 0, which no epoch matches.
void Cache::give_up_slot(MemoSlot &m) noexcept
{
    uint64_t s = m.stamp.load(std::memory_order_relaxed);
    while (!m.stamp.compare_exchange_weak(s, ((s >> 32) + 1) << 32, std::memory_order_release)) {
    }
}

// Lists the slot in one of the entry's four lanes (unless a lane has it already). With all four
// taken the entry overflows, and its retirement moves the epoch instead.
void Cache::note_memo_slot(Entry *e, size_t slot) noexcept
{
    uint64_t lane_value = (uint64_t)slot + 1;
    uint64_t lanes = e->memo_slots.load(std::memory_order_seq_cst);
    for (;;) {
        if (lanes == kMemoSlotsOverflow)
            return;
        uint64_t next = kMemoSlotsOverflow;
        for (unsigned i = 0; i < 4; i++) {
            uint64_t lane = (lanes >> (16 * i)) & 0xffff;
            if (lane == lane_value)
                return;
            if (lane == 0) {
                next = lanes | (lane_value << (16 * i));
                break;
            }
        }
        if (e->memo_slots.compare_exchange_weak(lanes, next, std::memory_order_seq_cst))
            return;
    }
}

// Under lock_, as a registration of e retires: no memo slot may hand it out from now on.
void Cache::forget_memo_of(Entry *e) noexcept
{
    // Inside a write section: its start moved seq_ (seq_cst) before the lanes are read here,
    // as memo_fill needs.
    uint64_t lanes = e->memo_slots.load(std::memory_order_seq_cst);
    if (lanes == kMemoSlotsOverflow) {
        move_epoch();
        return;
    }
    for (unsigned i = 0; i < 4; i++) {
        uint64_t lane = (lanes >> (16 * i)) & 0xffff;
        if (lane)
            invalidate_slot(memo_[lane - 1], e);
    }
}

// The slot, if it holds e or a filler is writing it (that filler then fails to publish). A
// slot of another entry stays: lanes are never taken back, so a slot that e once had may
// belong to another entry now.
void Cache::invalidate_slot(MemoSlot &m, const Entry *e) noexcept
{
    uint64_t s = m.stamp.load(std::memory_order_seq_cst);
    for (;;) {
        if ((uint32_t)s == 0)
            return;  // invalid, and no filler in it: a later one sees seq_ moved
        if (!(s & 1)) {
            const Entry *holder = m.entry.load(std::memory_order_relaxed);
            std::atomic_thread_fence(std::memory_order_acquire);
            uint64_t again = m.stamp.load(std::memory_order_relaxed);
            if (again != s) {
                s = again;
                continue;
            }
            if (holder != e)
                return;
        }
        // A new fill count and epoch 0 (never valid); a filler at work keeps the odd bit, and
        // only it clears it (give_up_slot).
        if ((uint32_t)s == 1)
            return;  // a filler at work (odd), invalidated already (epoch 0)
        if (m.stamp.compare_exchange_weak(s, (((s >> 32) + 1) << 32) | (s & 1),
                                          std::memory_order_seq_cst))
            break;
    }
    // The set's other way: valid, or a filler at work in it (its stamp's low half is then the
    // epoch plus the odd bit), keeps the set live.
    size_t slot = (size_t)(&m - memo_);
    uint64_t other = memo_[slot ^ 1].stamp.load(std::memory_order_relaxed);
    if ((uint32_t)(other & ~1ull) != (uint32_t)epoch_.load(std::memory_order_relaxed))
        memo_live_[slot / 2 / 64].fetch_and(~memo_live_bit(slot / 2), std::memory_order_relaxed);
}

// Loaded first: a word is shared by 64 sets, and most callers find their bit set already.
void Cache::set_bit_of(std::atomic<uint64_t> *bits, size_t set) noexcept
{
    std::atomic<uint64_t> &word = bits[set / 64];
    uint64_t bit = memo_live_bit(set);
    if (!(word.load(std::memory_order_relaxed) & bit))
        word.fetch_or(bit, std::memory_order_relaxed);
}

void Cache::mark_set_live(size_t set) noexcept { set_bit_of(memo_live_, set); }

void Cache::mark_set_hit(Device *dev, uintptr_t addr) noexcept
{
    set_bit_of(memo_hit_, memo_set_number(dev, addr));
}

void Cache::clear_live_sets() noexcept
{
    for (std::atomic<uint64_t> &word : memo_live_)
        word.store(0, std::memory_order_relaxed);
}

// Under lock_. Memo slots filled before this moment stop being valid.
void Cache::move_epoch() noexcept
{
    uint64_t next = epoch_.load(std::memory_order_relaxed) + 2;
    if ((uint32_t)next == 0) {
        // The low half wraps: slots from 2^31 moves ago would look valid again. Close
        // the memo (an odd epoch matches no slot), invalidate every slot, then reopen.
        epoch_.store(next - 1, std::memory_order_seq_cst);
        clear_memo();
        next += 2;
        counts_.memo_wraps.fetch_add(1, std::memory_order_relaxed);
    }
    epoch_.store(next, std::memory_order_release);
    clear_live_sets();  // no slot is valid now
}

void Cache::clear_memo() noexcept
{
    for (size_t i = 0; i < kMemoSlots; i++) {
        uint64_t s = memo_[i].stamp.load(std::memory_order_relaxed);
        // A new fill count and epoch 0 (never valid); a filler in progress fails to publish
        // and clears the odd bit it keeps (give_up_slot).
        while (!memo_[i].stamp.compare_exchange_weak(s, (((s >> 32) + 1) << 32) | (s & 1),
                                                     std::memory_order_acq_rel)) {
        }
    }
}

// The hit through the tree, under the sequence count; fills the memo for next time.
bool Cache::hit(Device *dev, uintptr_t addr, uintptr_t end, unsigned access, ThreadRecord *t,
                Reg **out, WalkHint *hint) noexcept
{
    for (int spin = 0; spin < kHitSpins; spin++) {
        uint64_t epoch = epoch_.load(std::memory_order_acquire);
        uint64_t s = seq_.load(std::memory_order_acquire);
        if (s & 1) {
            cpu_relax();
            continue;
        }
        void *after;
        bool after_known;
        const void *leaf;
        Entry *below = static_cast<Entry *>(index_.floor_r(addr, &after, &after_known, &leaf));
        Entry *e = below && below->end.load(std::memory_order_relaxed) >= end ? below : nullptr;
        Reg *r = nullptr;
        if (e) {
            r = e->regs.load(std::memory_order_acquire);
            // A registration (40 bytes) spans two lines in half of the places its pool gives:
            // the second is asked for with the first, not after it.
            if (r)
                __builtin_prefetch(reinterpret_cast<const char *>(r) + sizeof(Reg) - 1);
            for (int n = 0; r && n < kMaxRegWalk; n++, r = r->next.load(std::memory_order_relaxed))
                if (r->dev.load(std::memory_order_relaxed) == dev && (reg_access(r) & access) == access)
                    break;
            if (r && watch_changed(e))
                r = nullptr;  // the tracker says the pages changed: the miss path drops it
        }
        if (!r) {
            std::atomic_thread_fence(std::memory_order_acquire);
            if (seq_.load(std::memory_order_acquire) != s)
                continue;
            // Entries start at page boundaries, so the neighbours of addr are those of its
            // page's start, which is where the miss plans.
            if (hint)
                *hint = WalkHint{s, below, static_cast<Entry *>(after), after_known, leaf};
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
        mark_set_hit(dev, addr);
        memo_fill(epoch, s, dev, addr, e, r);
        if (!e->used.load(std::memory_order_relaxed))
            e->used.store(1, std::memory_order_relaxed);
        if (stat_slot_ < kFastStatCaches)
            t->tree_hits[stat_slot_].store(t->tree_hits[stat_slot_].load(std::memory_order_relaxed) + 1,
                                           std::memory_order_relaxed);
        else
            counts_.hits_shared.fetch_add(1, std::memory_order_relaxed);
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
    if (dev->laned) {  // a granule nobody owned yet: it is this thread's lane's now
        Device *to = claim_granule(dev, a);
        if (to != dev)
            return to->cache->get(to, addr, len, access, out);
    }
    note_reader_progress(t);  // before this get's hold: see grace_seen_by_all
    // vmt_get has already tried the memo (or had no thread record yet): the tree is next.
    WalkHint hint;
    if (hit(dev, a, end, access, t, out, &hint))
        return 0;
    return miss(dev, a0, a1, access, out, &hint);
}

// A memo hit that took its hold and then saw the slot change gives the hold back.
inline void memo_backout(Device *d, uintptr_t found)
{
    Reg *r = reinterpret_cast<Reg *>(found & ~kMemoBackout);
    hold_remove(t_record, hold_key(r));
    if (reg_state(r) != kRegLive)
        d->cache->reclaim_now();
}

// vmt_get_memo's: inlined there, the reclaim's call would give its common path a frame.
__attribute__((noinline)) void memo_backout_outlined(Device *d, uintptr_t found)
{
    memo_backout(d, found);
}

// The rest of vmt_get: anything but a memo hit.
__attribute__((noinline)) int get_rare(Device *d, const void *addr, size_t len, unsigned access,
                                       struct vmt_reg **out, uintptr_t found)
{
    if (found & kMemoBackout) {
        memo_backout(d, found);
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

// get_rare for vmt_get_handle: the handle from the registration itself.
__attribute__((noinline)) int get_rare_handle(Device *d, const void *addr, size_t len,
                                              unsigned access, struct vmt_reg **out,
                                              uintptr_t found, void **handle)
{
    int rc = get_rare(d, addr, len, access, out, found);
    *handle = rc == 0 ? reinterpret_cast<Reg *>(*out)->handle.load(std::memory_order_relaxed)
                      : nullptr;
    return rc;
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

// A put whose hold has left this thread's slots, while something of the process is retired:
// true where nothing more is needed of it. Inline in vmt_put as well: a random workload
// through a cache at its limit always has evictions waiting for their batch, so that every
// put, hits' too, came this way through a call (2 ns of its 115).
inline bool released_put_done(ThreadRecord *t, const Reg *r) noexcept
{
    // Between two gets of this thread: a thread that hits through the memo while another
    // retires lets that one's batches pass without a barrier (see grace_seen_by_all).
    if (t)
        note_reader_progress(t);
    publish_fence();
    if (g_retiring_caches.load(std::memory_order_acquire) == 0)
        return true;
    // Some registration is retired, maybe another: only this one's state matters, read like
    // the count above (a retirement stores it before its reclaim's barrier). If it was
    // reclaimed and reused since the hold went, a later registration reads as live: its
    // reclaim did not need this put.
    return reg_state(r) == kRegLive;
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
    Reg *r = reinterpret_cast<Reg *>(reg);
    if (released && released_put_done(t_record, r))
        return;
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
namespace vmt {
// vmt_get and vmt_get_handle: the memo's first way with the hold's home slot free, written
// out so that it stays a leaf; everything else is get_rare's. With `handle`, the
// registration's handle comes from the memo slot, read under its stamp like the rest: the
// caller does not load the registration itself.
template <bool kMemoOnly>
int get_in_lane(Device *d, const void *addr, size_t len, unsigned access,
                struct vmt_reg **out, void **handle);

// kRouted: d is the device of a's lane already (get_in_lane).
template <bool kMemoOnly, bool kRouted>
__attribute__((always_inline)) inline int get_inline(struct vmt_device *dev, const void *addr,
                                                     size_t len, unsigned access,
                                                     struct vmt_reg **out, void **handle)
{
    Device *d = reinterpret_cast<Device *>(dev);
    uintptr_t a = reinterpret_cast<uintptr_t>(addr);
    uintptr_t found = kMemoMiss;
    Cache *c;
    uint64_t tag, epoch, stamp, hold, key;
    size_t first;
    const Cache::MemoSlot *m;
    ThreadRecord *t;
    std::atomic<uint64_t> *slot;
    void *h = nullptr;
    // Where readers must fence (no membarrier), the memo is never filled: no check needed here.
    if (kMemoOnly && __builtin_expect(!d || !out || !a || a + len <= a ||
                                          (access & ~VMT_ACCESS_ALL), 0))
        return -EINVAL;
    if (!kMemoOnly && __builtin_expect(!d || !out || a + len <= a, 0))
        goto rare;
    // A device with lanes, once they are in use, goes to the lane that owns a's granule: by a
    // tail call, so that the common path below keeps its registers (a test for lanes at its
    // rare end kept the arguments alive across it, two more registers saved on every hit).
    if (!kRouted && __builtin_expect(d->lane_owner.load(std::memory_order_relaxed) != nullptr, 0))
        return get_in_lane<kMemoOnly>(d, addr, len, access, out, handle);
    // Only the set's first way: the second (and a busy home slot for the hold) is get_rare's.
    tag = (a >> 12) | d->memo_tag.load(std::memory_order_relaxed);
    first = memo_set(tag);
    m = &static_cast<const Cache::MemoSlot *>(d->memo)[first];
    if (__builtin_expect(!(d->memo_live[first / 2 / 64].load(std::memory_order_relaxed) &
                           Cache::memo_live_bit(first / 2)), 0))
        goto rare;  // nothing valid in the set (memo_live_): the tree is next
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
    if (d->check_words && c->watch_changed(m))
        goto rare;  // the pages changed, or a torn read (the stamp check below catches that)
    hold = m->hold.load(std::memory_order_relaxed);
    if (handle)
        h = m->handle.load(std::memory_order_relaxed);
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
    if (__builtin_expect(c->epoch_.load(std::memory_order_acquire) != epoch ||
                             m->stamp.load(std::memory_order_acquire) != stamp, 0)) {
        found |= kMemoBackout;
        goto rare;
    }
    c->count_memo_hit(
        *reinterpret_cast<std::atomic<uint64_t> *>(reinterpret_cast<char *>(t) + d->hits_offset), m);
    *out = reinterpret_cast<struct vmt_reg *>(found);
    if (handle)
        *handle = h;
    return 0;
rare:
    // vmt_get_memo answers here with what the hold needs only: arguments kept for a call
    // would take registers (saved and restored on its common path).
    if (kMemoOnly) {
        if (found & kMemoBackout)
            memo_backout_outlined(d, found);
        return -EAGAIN;
    }
    // Tail calls both: the common path above keeps no frame.
    return handle ? get_rare_handle(d, addr, len, access, out, found, handle)
                  : get_rare(d, addr, len, access, out, found);
}
}  // namespace vmt

namespace vmt {
// get_inline for the device of the lane that owns addr's granule.
template <bool kMemoOnly>
__attribute__((noinline)) int get_in_lane(Device *d, const void *addr, size_t len,
                                          unsigned access, struct vmt_reg **out, void **handle)
{
    Device *to = lane_device(d, reinterpret_cast<uintptr_t>(addr));
    return get_inline<kMemoOnly, true>(reinterpret_cast<struct vmt_device *>(to), addr, len,
                                       access, out, handle);
}
}  // namespace vmt

extern "C" int vmt_get(struct vmt_device *dev, const void *addr, size_t len, unsigned access,
                       struct vmt_reg **out)
{
    return vmt::get_inline(dev, addr, len, access, out, nullptr);
}

extern "C" int vmt_get_handle(struct vmt_device *dev, const void *addr, size_t len,
                              unsigned access, struct vmt_reg **out, void **handle)
{
    if (__builtin_expect(!handle, 0))
        return -EINVAL;
    return vmt::get_inline(dev, addr, len, access, out, handle);
}

// The memo is a cache of the index: leaving it out changes where the answer comes from, not
// the answer.
extern "C" int vmt_get_handle_walk(struct vmt_device *dev, const void *addr, size_t len,
                                   unsigned access, struct vmt_reg **out, void **handle)
{
    if (__builtin_expect(!handle, 0))
        return -EINVAL;
    vmt::Device *d = reinterpret_cast<vmt::Device *>(dev);
    if (d)
        d = vmt::lane_device(d, reinterpret_cast<uintptr_t>(addr));
    return vmt::get_rare_handle(d, addr, len, access, out, vmt::kMemoMiss, handle);
}

extern "C" int vmt_get_memo(struct vmt_device *dev, const void *addr, size_t len,
                            unsigned access, struct vmt_reg **out, void **handle)
{
    return vmt::get_inline<true>(dev, addr, len, access, out, handle);
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
            slot.store(s - 1, vmt::kHoldPutOrder);
            // Fencing readers (no membarrier) keep g_retiring_caches above 0: they never return here.
            std::atomic_signal_fence(std::memory_order_seq_cst);
            if (__builtin_expect(vmt::g_retiring_caches.load(std::memory_order_acquire) == 0, 1))
                return;
            if (vmt::released_put_done(t, reinterpret_cast<vmt::Reg *>(reg)))
                return;
            vmt::put_full(reg, true);
            return;
        }
    }
    vmt::put_full(reg, false);
}

