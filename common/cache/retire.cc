// Retirement and reclaim, and the slow half of vmt_put.
//
// Invariant: a registration is deregistered only when no thread holds it and no reader can
// still find it. retire() takes it out of its entry (under the index lock, in a write section)
// into limbo_ and invalidates its entry's memo slots, so neither the tree nor the memo hands
// it out again.
// Retired registrations wait in limbo_ for a batch (kReclaimBatch, or kReclaimBatchBytes), so
// that one barrier serves many (reclaim_if_due, which leaves its batch to a pass already
// running in another thread rather than wait for it); a device at its own limit, flush,
// invalidate, detach and the last put of a retired registration reclaim at once (reclaim), and
// so does every caller where the barrier is free (no other thread owns a thread record), but
// for evictions made only for max_entries (limbo_urgent_, Cache::evict_for_insert).
// reclaim() then runs reader_barrier(): every reader that published a hold before the
// retirement is now visible to it, and every later reader sees the moved sequence or epoch
// and takes its hold back. A batch's pass in a threaded process proves the same by a grace
// period where it can (after_grace, holds.h): the batch waits until every other thread has
// noted it, and the barrier is left for threads that do not. What is still held after that
// stays in limbo_ (counted as deferred) until a later reclaim; the rest is deregistered
// outside the index lock, and an entry goes back to its pool (and is unwatched) with its last
// registration.
// While a device's reg runs in this thread (a stacked cache's miss), nothing is reclaimed:
// the cache is noted and reclaimed when the outermost reg returns (defer_reclaim).
#include "config.h"
#include "cache/cache.h"

#include <cstdlib>
#include <mutex>

#include "cache/internal.h"
#include "util/log.h"

namespace vmt {

__thread int t_reclaims_deferred __attribute__((tls_model("initial-exec"))) = 0;

namespace {
// Initial-exec, like t_record: the default TLS model in a shared library costs a
// __tls_get_addr call per use.
__thread bool t_in_reclaim __attribute__((tls_model("initial-exec"))) = false;
// The caches whose reclaim a device's reg in this thread put off (Cache::defer_reclaim).
constexpr int kMaxDeferredReclaims = 4;
__thread Cache *t_deferred_caches[kMaxDeferredReclaims] __attribute__((tls_model("initial-exec")));
// A reclaim asked for while this thread reclaims (a put from a device's dereg): run again.
__thread bool t_reclaim_again __attribute__((tls_model("initial-exec"))) = false;
constexpr int kReclaimPasses = 4;  // bounds the passes of one reclaim() such puts can cause
// Retired registrations wait for a batch: one reader barrier (membarrier: an interrupt on every
// CPU that runs a thread of the process) for this many, or this many bytes, whichever first.
constexpr size_t kReclaimBatch = 64;
constexpr size_t kReclaimBatchBytes = 64u << 20;

// r's holds: those in threads' slots and those in its shared counter.
int64_t holds_of(const Reg *r) noexcept
{
    return r->shared_holds.load(std::memory_order_acquire) + holds_in_threads(hold_key(r));
}
}  // namespace

void Cache::retire(Reg *r) noexcept
{
#ifdef VMT_DEBUG
    if (write_depth_ == 0) {  // memo_fill's ordering needs the write section's start
        VMT_LOG_ERROR("retire outside a write section");
        abort();
    }
#endif
    Entry *e = r->entry.load(std::memory_order_relaxed);
    forget_memo_of(e);  // no memo slot hands r out from here on (see MemoSlot)
    reg_set_state(r, kRegRetired);
    Device *d = r->dev.load(std::memory_order_relaxed);
    if (device_soft_limited(d)) {  // undone in free_deregistered_locked
        d->regions_leaving++;
        d->bytes_leaving += e->end.load(std::memory_order_relaxed) -
                            e->start.load(std::memory_order_relaxed);
    }
    if (limbo_total_.load(std::memory_order_relaxed) == 0) {
        if (defer_retiring_count_)
            retiring_uncounted_ = true;  // count_retiring_left decides
        else
            g_retiring_caches.fetch_add(1, std::memory_order_relaxed);  // see its declaration
    }
    r->next.store(limbo_, std::memory_order_relaxed);
    limbo_ = r;
    limbo_nonempty_.store(true, std::memory_order_relaxed);
    add_under_lock(limbo_new_, size_t{1});
    add_under_lock(limbo_new_bytes_, size_t{e->end.load(std::memory_order_relaxed) -
                                            e->start.load(std::memory_order_relaxed)});
    add_under_lock(limbo_total_, size_t{1});
    if (!retire_may_wait_)
        add_under_lock(limbo_urgent_, size_t{1});
}

void Cache::count_deregistration(size_t len) noexcept
{
    add_under_lock(counts_.deregistrations, uint64_t{1});
    add_under_lock(counts_.bytes_registered, uint64_t{0} - len);
}

void Cache::count_registration(size_t len) noexcept
{
    add_under_lock(counts_.registrations, uint64_t{1});
    add_under_lock(counts_.bytes_registered, uint64_t{len});
}

Reg *Cache::retire_device_regs(Entry *e, Device *dev, bool *retired) noexcept
{
    Reg *keep = nullptr, *r = e->regs.load(std::memory_order_relaxed);
    Reg **tail = &keep;
    *retired = false;
    while (r) {
        Reg *next = r->next.load(std::memory_order_relaxed);
        if (r->dev.load(std::memory_order_relaxed) == dev) {
            retire(r);
            *retired = true;
        } else {
            r->next.store(nullptr, std::memory_order_relaxed);
            *tail = r;
            tail = reinterpret_cast<Reg **>(&r->next);
        }
        r = next;
    }
    return keep;
}

void Cache::remove_entry(Entry *e) noexcept
{
    log_invalidation(e->start.load(std::memory_order_relaxed), e->end.load(std::memory_order_relaxed));
    unindex_entry(e);
}

void Cache::unindex_entry(Entry *e) noexcept
{
    index_.erase_hinted(e->start.load(std::memory_order_relaxed), e->leaf);
    e->in_index.store(false, std::memory_order_relaxed);
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
        deregister(dev, r->handle.load(std::memory_order_relaxed));
        std::lock_guard<SpinLock> g(lock_);
        dev->regions--;
        dev->bytes -= len;
        count_deregistration(len);
        reg_set_state(r, kRegDead);
        regs_.free(r);
        entries_.free(e);
        return;
    }
    // Not in this thread's slots: a put by another thread, or once too often.
    int64_t held = holds_of(r);
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

void Cache::reclaim_if_due() noexcept
{
    if (!limbo_nonempty_.load(std::memory_order_relaxed))
        return;
    if (limbo_new_.load(std::memory_order_relaxed) >= kReclaimBatch ||
        limbo_new_bytes_.load(std::memory_order_relaxed) >= kReclaimBatchBytes ||
        (limbo_urgent_.load(std::memory_order_relaxed) != 0 && reader_barrier_is_free()))
        reclaim_soon();
}

void Cache::reclaim_soon() noexcept
{
    if (t_device_reg_depth)
        defer_reclaim();
    else
        reclaim_unless_busy();
}

// A batch that is due need not wait for another thread's pass: that pass, or the next batch,
// takes what this thread retired. Waiting would cost a futex sleep and then a second barrier
// for the few registrations retired in between (two threads missing together found their
// batches due at the same moment and did exactly that).
void Cache::reclaim_unless_busy() noexcept
{
    if (t_in_reclaim) {
        t_reclaim_again = true;
        return;
    }
    std::unique_lock<SpinLock> rl(reclaim_lock_, std::try_to_lock);
    if (rl.owns_lock())
        run_reclaim_passes(true);
}

void Cache::reclaim() noexcept
{
    if (t_in_reclaim) {
        t_reclaim_again = true;  // the pass running in this thread repeats when it is done
        return;
    }
    if (!limbo_nonempty_.load(std::memory_order_acquire) && !waiting_nonempty())
        return;
    if (t_device_reg_depth) {
        defer_reclaim();
        return;
    }
    reclaim_settled();
}

// Inside a device's reg (a stacked cache's miss, or a put there), nothing is deregistered: the
// reg may hold a lock that its dereg takes too (UCX runs an md's mem_reg and mem_dereg under
// one), and a pass here could call that dereg in this thread, or wait for a pass in another
// thread that waits in that dereg for the lock. The reclaim runs when the outermost reg
// returns (run_deferred_reclaims); a device at its own limit holds one registration more until
// then (test_cache_bugs: the two nested-miss cases).
void Cache::defer_reclaim() noexcept
{
    for (int i = 0; i < t_reclaims_deferred; i++)
        if (t_deferred_caches[i] == this)
            return;
    if (t_reclaims_deferred < kMaxDeferredReclaims)
        t_deferred_caches[t_reclaims_deferred++] = this;
    // else: more caches than that nested in one reg; this one's next batch takes it.
}

void Cache::run_deferred_reclaims() noexcept
{
    while (t_reclaims_deferred > 0)
        t_deferred_caches[--t_reclaims_deferred]->reclaim();
}

// vmt_flush's promise, "nothing unheld is left registered when it returns", covers what a
// pass in another thread (a hook's reclaim after an unmap) took out of limbo_ and has not
// deregistered yet: limbo_ looks empty then, so this waits for that pass on reclaim_lock_
// instead of trusting limbo_nonempty_.
void Cache::reclaim_settled() noexcept
{
    if (t_in_reclaim) {
        t_reclaim_again = true;
        return;
    }
    std::lock_guard<SpinLock> rl(reclaim_lock_);
    run_reclaim_passes(false);
}

// reclaim_lock_ is held: passes until no put from a device's dereg asks for another.
void Cache::run_reclaim_passes(bool may_wait) noexcept
{
    t_in_reclaim = true;
    for (int pass = 0; pass < kReclaimPasses; pass++) {
        t_reclaim_again = false;
        reclaim_pass(may_wait);
        if (!t_reclaim_again)
            break;
    }
    t_reclaim_again = false;
    t_in_reclaim = false;
}

// For detach: the device's registrations that are retired but still held are deregistered
// now (the device may be destroyed when detach returns). A dereg may put a registration of
// another device of this cache (stacked caches): its reclaim runs after this, not inside it
// (which would wait for reclaim_lock_ held here).
size_t Cache::deregister_held(Device *dev) noexcept
{
    size_t held = 0;
    {
        std::lock_guard<SpinLock> rl(reclaim_lock_);
        t_in_reclaim = true;
        t_reclaim_again = false;
        for (;;) {
            Reg *victim = nullptr;
            {
                std::lock_guard<SpinLock> g(lock_);
                // The waiting batches are this pass's (reclaim_lock_ is held), limbo_ the
                // lock's.
                Reg *lists[1 + kWaitingBatches] = {limbo_};
                for (int i = 0; i < kWaitingBatches; i++)
                    lists[1 + i] = waiting_[i].list;
                for (Reg *list : lists)
                    for (Reg *r = list; r && !victim; r = r->next.load(std::memory_order_relaxed))
                        if (r->dev.load(std::memory_order_relaxed) == dev &&
                            reg_state(r) == kRegRetired)
                            victim = r;
                if (victim) {
                    reg_set_state(victim, kRegDead);
                    Entry *e = victim->entry.load(std::memory_order_relaxed);
                    count_deregistration(e->end.load() - e->start.load());
                }
            }
            if (!victim)
                break;
            held++;
            deregister(dev, victim->handle.load(std::memory_order_relaxed));
        }
        t_in_reclaim = false;
    }
    if (t_reclaim_again) {
        t_reclaim_again = false;
        reclaim();
    }
    return held;
}

// One pass: everything in limbo_ now, and the batch that waited for its grace period.
// reclaim_lock_ is held.
void Cache::reclaim_pass(bool may_wait) noexcept
{
    Reg *list;
    size_t bytes;
    bool work;  // the waiting slots change only under reclaim_lock_, which this pass holds
    {
        std::lock_guard<SpinLock> g(lock_);
        bytes = limbo_new_bytes_.load(std::memory_order_relaxed);
        list = detach_limbo_locked();
        work = list || waiting_nonempty();
        if (work)
            add_under_lock(counts_.reclaim_passes, uint64_t{1});
    }
    if (work) {
        uint64_t quiet_bound;
        list = after_grace(list, bytes, may_wait, &quiet_bound);
        reclaim_list(list, quiet_bound);
    }
}

// What of `list` (just taken from limbo_, `bytes` of it new) and of the waiting batches no
// reader can still take a hold of unseen: everything, where the reader barrier is free or is
// made; else each waiting batch whose grace period every other thread has noted. A batch
// pass (may_wait) leaves its list to wait for a period in a free slot instead of interrupting
// every thread of the process; a later pass finds it passed where the other threads keep
// calling into vmtrack (two threads missing together made a membarrier every 64 evictions,
// 5-25 us each on these VMs, the half of their time). With both slots waiting, or at a
// reclaim that must finish (flush, detach, a device that refuses past its limit), the
// barrier serves everything.
Reg *Cache::after_grace(Reg *list, size_t bytes, bool may_wait, uint64_t *quiet_bound) noexcept
{
    Reg *ready = nullptr;
    uint64_t newest_ready = 0;
    *quiet_bound = 0;
    if (!reader_barrier_if_free()) {
        uint64_t seen = waiting_nonempty() ? grace_seen_by_all() : 0;
        WaitingBatch *free_slot = nullptr;
        for (WaitingBatch &w : waiting_) {
            if (w.list && w.period <= seen) {
                newest_ready = std::max(newest_ready, w.period);
                ready = join_regs(take_batch(w), ready);
            }
            if (!w.list && !free_slot)
                free_slot = &w;
        }
        if (list && may_wait && free_slot) {
            park_batch(*free_slot, list, bytes);
            list = nullptr;
        }
        if (!list && (may_wait || !waiting_nonempty())) {
            *quiet_bound = newest_ready;
            return ready;
        }
        if (reader_barrier())
            counts_.reclaim_barriers.fetch_add(1, std::memory_order_relaxed);
    }
    return join_regs(join_regs(list, take_waiting()), ready);
}

// The slots change only under reclaim_lock_: their counters are stores, not read-modify-
// writes (the at-once reclaim of every miss at a device's limit takes them, and finds none).
void Cache::park_batch(WaitingBatch &w, Reg *list, size_t bytes) noexcept
{
    w.period = begin_grace_period();
    w.list = list;
    w.bytes = bytes;
    waiting_batches_.store(waiting_batches_.load(std::memory_order_relaxed) + 1,
                           std::memory_order_relaxed);
    waiting_bytes_.store(waiting_bytes_.load(std::memory_order_relaxed) + bytes,
                         std::memory_order_relaxed);
}

Reg *Cache::take_batch(WaitingBatch &w) noexcept
{
    Reg *list = w.list;
    if (list) {
        w.list = nullptr;
        waiting_batches_.store(waiting_batches_.load(std::memory_order_relaxed) - 1,
                               std::memory_order_relaxed);
        waiting_bytes_.store(waiting_bytes_.load(std::memory_order_relaxed) - w.bytes,
                             std::memory_order_relaxed);
        w.bytes = 0;
    }
    return list;
}

Reg *Cache::take_waiting() noexcept
{
    if (!waiting_nonempty())
        return nullptr;
    Reg *all = nullptr;
    for (WaitingBatch &w : waiting_)
        all = join_regs(take_batch(w), all);
    return all;
}

Reg *Cache::join_regs(Reg *a, Reg *b) noexcept
{
    if (!a || !b)
        return a ? a : b;
    Reg *tail = a;
    while (Reg *next = tail->next.load(std::memory_order_relaxed))
        tail = next;
    tail->next.store(b, std::memory_order_relaxed);
    return a;
}

Reg *Cache::detach_limbo_locked() noexcept
{
    Reg *list = limbo_;
    limbo_ = nullptr;
    limbo_nonempty_.store(false, std::memory_order_relaxed);
    limbo_new_.store(0, std::memory_order_relaxed);
    limbo_new_bytes_.store(0, std::memory_order_relaxed);
    limbo_urgent_.store(0, std::memory_order_relaxed);
    return list;
}

void Cache::reclaim_list(Reg *list, uint64_t quiet_bound) noexcept
{
    Reg *keep = nullptr, *done = nullptr;
    while (list) {
        // A chunk at a time, so that threads' records are read once per chunk
        // (holds_in_threads_many).
        Reg *chunk[kReclaimBatch];
        HoldKey ids[kReclaimBatch];
        int64_t held[kReclaimBatch];
        size_t n = 0;
        for (; list && n < kReclaimBatch; n++) {
            chunk[n] = list;
            ids[n] = hold_key(list);
            list = list->next.load(std::memory_order_relaxed);
        }
        holds_in_threads_many(ids, held, n, quiet_bound);
        for (size_t i = 0; i < n; i++) {
            Reg *r = chunk[i];
            if (held[i] + r->shared_holds.load(std::memory_order_acquire) > 0) {
                if (!(r->bits.load(std::memory_order_relaxed) & kBitsDeferred)) {
                    r->bits.fetch_or(kBitsDeferred, std::memory_order_relaxed);
                    counts_.deferred.fetch_add(1, std::memory_order_relaxed);
                }
                r->next.store(keep, std::memory_order_relaxed);
                keep = r;
                continue;
            }
            if (reg_state(r) != kRegDead)  // Dead: detach deregistered it (deregister_held)
                deregister(r->dev.load(std::memory_order_relaxed),
                           r->handle.load(std::memory_order_relaxed));
            r->next.store(done, std::memory_order_relaxed);
            done = r;
        }
    }
    release_entries(free_reclaimed(done, keep));
}

// Under the lock: frees the deregistered registrations in `done` and puts those still held
// (`keep`) back in limbo_. Returns the entries whose last registration went, linked by
// lru_next (they left the LRU list when they left the index).
Entry *Cache::free_reclaimed(Reg *done, Reg *keep) noexcept
{
    Entry *free_later = nullptr;
    std::lock_guard<SpinLock> g(lock_);
    while (done) {
        Reg *r = done;
        done = r->next.load(std::memory_order_relaxed);
        free_later = free_deregistered_locked(r, free_later);
    }
    while (keep) {
        Reg *r = keep;
        keep = r->next.load(std::memory_order_relaxed);
        r->next.store(limbo_, std::memory_order_relaxed);
        limbo_ = r;
        limbo_nonempty_.store(true, std::memory_order_relaxed);
    }
    return free_later;
}

Entry *Cache::free_deregistered_locked(Reg *r, Entry *free_later) noexcept
{
    Device *d = r->dev.load(std::memory_order_relaxed);
    Entry *e = r->entry.load(std::memory_order_relaxed);
    size_t len = e->end.load() - e->start.load();
    d->regions--;
    d->bytes -= len;
    if (device_soft_limited(d)) {  // retired (limbo_ holds nothing else): counted by retire()
        d->regions_leaving--;
        d->bytes_leaving -= len;
    }
    if (reg_state(r) != kRegDead)  // deregistered by a pass (not by detach)
        count_deregistration(len);
    reg_set_state(r, kRegDead);
    add_under_lock(limbo_total_, ~size_t{0});  // minus one
    if (limbo_total_.load(std::memory_order_relaxed) == 0) {
        if (retiring_uncounted_)
            retiring_uncounted_ = false;
        else
            g_retiring_caches.fetch_sub(1, std::memory_order_relaxed);
    }
    regs_.free(r);
    if (--e->regs_alive == 0 && !e->in_index.load(std::memory_order_relaxed)) {
        if (!e->watched) {  // nothing to unwatch: back to the pool now
            entries_.free(e);
            return free_later;
        }
        e->lru_next = free_later;  // reuse the link: the entry left the LRU list
        free_later = e;
    }
    return free_later;
}

// A miss that retired something that must go at once (a merge, an upgrade, the device's own
// limit) reclaims it here rather than through reclaim(): limbo_ is taken under the lock the
// miss holds anyway, and the reader barrier is its check that no other thread owns a record,
// made after every retirement it covers. A pass of its own took the index lock twice more and
// fenced three times; this fences once. What no thread holds is counted and freed here too,
// before its device call (which keeps only its device and handle): the pass's second turn of
// the lock, a tenth of a miss at a device's own limit, goes as well. reclaim_lock_ stays held
// until those calls are made, so that a detach or a flush waits for them as for a pass.
// Where another thread reads, nothing is taken: the retirements wait for a batch
// (reclaim_if_due) or the caller's reclaim() runs the barrier.
void Cache::take_limbo_if_free(TakenLimbo *tk) noexcept
{
    tk->taken = false;
    if (!limbo_ || t_in_reclaim || t_device_reg_depth || !reclaim_lock_.try_lock())
        return;
    if (!reader_barrier_if_free()) {
        reclaim_lock_.unlock();
        return;
    }
    tk->taken = true;
    tk->count = 0;
    tk->rest = nullptr;
    add_under_lock(counts_.reclaim_passes, uint64_t{1});
    // A batch that waited for its grace period (reclaim_lock_ is held) goes with the rest.
    for (Reg *list = join_regs(detach_limbo_locked(), take_waiting()); list;) {
        Reg *r = list;
        list = r->next.load(std::memory_order_relaxed);
        Entry *e = r->entry.load(std::memory_order_relaxed);
        bool unwatch = e->watched && e->regs_alive == 1 &&
                       !e->in_index.load(std::memory_order_relaxed);
        int64_t held = holds_of(r);
        if (held > 0 || unwatch || tk->count == TakenLimbo::kMax) {
            r->next.store(tk->rest, std::memory_order_relaxed);
            tk->rest = r;
            continue;
        }
        if (reg_state(r) != kRegDead) {  // Dead: detach deregistered it (deregister_held)
            tk->dev[tk->count] = r->dev.load(std::memory_order_relaxed);
            tk->handle[tk->count] = r->handle.load(std::memory_order_relaxed);
            tk->count++;
        }
        free_deregistered_locked(r, nullptr);
    }
}

void Cache::count_retiring_left() noexcept
{
    defer_retiring_count_ = false;
    if (retiring_uncounted_) {  // limbo_total_ > 0: what take_limbo_if_free did not free
        retiring_uncounted_ = false;
        g_retiring_caches.fetch_add(1, std::memory_order_relaxed);
    }
}

// reclaim_lock_ is held (take_limbo_if_free), and released here.
void Cache::reclaim_taken(TakenLimbo *tk) noexcept
{
    t_in_reclaim = true;
    t_reclaim_again = false;
    for (int i = 0; i < tk->count; i++)
        deregister(tk->dev[i], tk->handle[i]);
    if (tk->rest)
        reclaim_list(tk->rest, 0);
    t_in_reclaim = false;
    reclaim_lock_.unlock();
    if (t_reclaim_again) {  // a dereg put a registration of this cache
        t_reclaim_again = false;
        reclaim();
    }
}

// Unwatches the entries (outside the lock), then gives them back to their pool (under it).
void Cache::release_entries(Entry *free_later) noexcept
{
    if (!free_later)
        return;
    for (Entry *e = free_later; e; e = e->lru_next) {
        tracker_->unwatch(e->start.load(), e->end.load() - e->start.load(),
                          WatchToken{e->watch_handle.load(), e->watch_expect.load()});
        e->watched = false;
    }
    std::lock_guard<SpinLock> g(lock_);
    while (free_later) {
        Entry *e = free_later;
        free_later = e->lru_next;
        e->lru_next = nullptr;
        entries_.free(e);
    }
}

}  // namespace vmt
