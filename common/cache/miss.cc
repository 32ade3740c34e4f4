// The miss path: plan under the index lock (or without it, where the failed hit's walk saw
// nothing cached near the request and no writer ran since: plan_without_lock), watch and
// register without it, insert under it.
//
// Invariant: a registration enters the index only if nothing invalidated its range between the
// plan and the insert. The plan notes the invalidation log's count (Plan::mark); while the
// lock is dropped, every unmap or invalidation of an overlapping range either is still in
// unmaps_ at the insert or has logged itself (at its start and again at its end) in inval_log_
// since the mark; a watched range whose validity word moved (kmod) changed as well. Any of
// these, and the registration is dropped and the miss starts again (kMissAttempts times, then
// it is served uncached). An upgrade checks that its base entry is still the same range in the
// index, since it may have been freed and reused meanwhile. Unmaps that skip the lock cannot
// race a miss at all (Cache::MissInProgress). Device calls, tracker watches and the mapped
// check run without the lock: they may block or unmap memory. The mapped check is no system
// call of the cache's where the device checks (VMT_DEVICE_CHECKS_MAPPED) or the watch does
// (kmod), one per 2 MiB block under hooks (mapped_blocks.h), and otherwise covers only the
// request: the cached neighbours a union absorbs are mapped while the tracker (one
// that sees unmaps) keeps them valid, and one unmapped meanwhile makes the insert fail. So
// does one that leaves the index meanwhile (evicted, flushed: remove_entry logs it), since
// from its unwatch on no tracker that watches ranges (uffd, kmod) hears of its unmap.
#include "config.h"
#include "cache/cache.h"

#include <sched.h>

#include <cerrno>
#include <mutex>

#include "cache/internal.h"
#include "util/log.h"

namespace vmt {

namespace {

constexpr int kMissAttempts = 8;  // a miss raced by invalidations this often is served uncached

// What a step of a miss tells Cache::miss, besides 0 (done) and a negative errno.
constexpr int kMissAgain = 1;      // the pages changed while we registered them: start again
constexpr int kMissUnmerged = 2;   // the union had a hole: start again with just the request
constexpr int kMissUncached = 3;   // the tracker cannot watch this range: serve it uncached

// -ENOSPC if the device cannot register [a0, a1) in one piece.
int check_region_bytes(const Device *dev, uintptr_t a0, uintptr_t a1)
{
    if (!dev->ops.max_region_bytes || a1 - a0 <= dev->ops.max_region_bytes)
        return 0;
    VMT_LOG_WARN("vmt_get: %zu bytes is more than device %s registers at once (%zu)",
                 (size_t)(a1 - a0), dev->name.c_str(), dev->ops.max_region_bytes);
    return -ENOSPC;
}

}  // namespace

void Cache::take_hold(ThreadRecord *t, Reg *r) noexcept
{
    if (!hold_add(t, hold_key(r)))
        r->shared_holds.fetch_add(1, std::memory_order_relaxed);
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
    uint64_t count = inval_count_.load(std::memory_order_relaxed);
    if (count - mark > kInvalLog)
        return true;  // the log wrapped: assume the worst
    for (uint64_t i = mark; i < count; i++) {
        const Range &r = inval_log_[i % kInvalLog];
        if (r.start < a1 && r.end > a0)
            return true;
    }
    return false;
}

__thread int t_device_reg_depth __attribute__((tls_model("initial-exec"))) = 0;

namespace {
int call_reg(Device *dev, uintptr_t a0, uintptr_t a1, unsigned access, void **handle) noexcept
{
    t_device_reg_depth++;
    int rc = dev->ops.reg(dev->ctx, reinterpret_cast<void *>(a0), a1 - a0, access, handle);
    if (--t_device_reg_depth == 0 && __builtin_expect(t_reclaims_deferred != 0, 0))
        Cache::run_deferred_reclaims();
    return rc;
}
}  // namespace

int Cache::reg_evicting(Device *dev, uintptr_t a0, uintptr_t a1, unsigned access, Entry *keep,
                        bool *may_evict, void **handle) noexcept
{
    int rc = call_reg(dev, a0, a1, access, handle);
    if ((rc == -ENOMEM || rc == -ENOSPC) && *may_evict) {
        *may_evict = false;
        counts_.retries.fetch_add(1, std::memory_order_relaxed);
        {
            std::lock_guard<SpinLock> g(lock_);
            write_begin();
            evict_locked(dev, keep, 1, a1 - a0);
            write_end();
        }
        reclaim();
        rc = call_reg(dev, a0, a1, access, handle);
    }
    if (rc > 0)
        rc = -EIO;  // a device that returns a positive value broke its contract
    return rc;
}

int Cache::get_uncached(Device *dev, uintptr_t a0, uintptr_t a1, unsigned access, Reg **out)
{
    // Always a system call: this path also serves a hooks tracker that another patcher took
    // over, after which what mapped_blocks_ says is no longer known.
    if (!device_checks_mapped(dev) && !range_mapped(a0, a1))
        return -EFAULT;
    int rc = check_region_bytes(dev, a0, a1);
    if (rc < 0)
        return rc;
    void *handle = nullptr;
    bool may_evict = true;
    rc = reg_evicting(dev, a0, a1, access, nullptr, &may_evict, &handle);
    if (rc < 0)
        return rc;
    Entry *e;
    Reg *r;
    {
        std::lock_guard<SpinLock> g(lock_);
        e = entries_.alloc();
        r = e ? regs_.alloc() : nullptr;
        if (e && !r) {
            entries_.free(e);
            e = nullptr;
        }
        if (e) {
            dev->regions++;
            dev->bytes += a1 - a0;
            count_registration(a1 - a0);
            add_under_lock(counts_.misses, uint64_t{1});
        }
    }
    if (!e) {
        deregister(dev, handle);
        return -ENOMEM;
    }
    e->start.store(a0);
    e->end.store(a1);
    e->memo_slots.store(0, std::memory_order_relaxed);
    e->regs.store(r);
    e->in_index.store(false, std::memory_order_relaxed);
    e->watched = false;
    e->regs_alive = 1;
    r->entry.store(e);
    r->dev.store(dev);
    r->handle.store(handle);
    r->next.store(nullptr);
    r->shared_holds.store(1);
    r->bits.store(access | kRegUncached << 8, std::memory_order_release);
    counts_.uncached.fetch_add(1, std::memory_order_relaxed);
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

int Cache::miss(Device *dev, uintptr_t a0, uintptr_t a1, unsigned access, Reg **out,
                const WalkHint *hint)
{
    MissInProgress counted(this);
    tracker_->poll();
    reclaim_if_due();
    ThreadRecord *t = thread_record();
    int rc = check_region_bytes(dev, a0, a1);
    if (rc < 0)
        return rc;
    bool allow_merge = merge_;
    bool may_evict = true;  // once per miss: evict for room on the device, then try again
    for (int attempt = 0; attempt < kMissAttempts; attempt++) {
        Plan plan;
        if (plan_miss(dev, a0, a1, access, allow_merge, attempt == 0, t, &plan, out,
                      attempt == 0 ? hint : nullptr))
            return 0;
        rc = register_plan(dev, a0, a1, &plan, &may_evict);
        if (rc == 0) {
            rc = insert_plan(dev, a0, a1, plan, allow_merge, t, out);
        } else if (plan.count_miss) {
            std::lock_guard<SpinLock> g(lock_);
            count_miss_locked(plan);
        }
        if (rc == kMissUncached)
            return get_uncached(dev, a0, a1, access, out);
        if (rc == kMissUnmerged)
            allow_merge = false;
        else if (rc != kMissAgain)
            return rc;
    }
    // The range keeps changing under us: give the caller a registration that is not cached.
    return get_uncached(dev, a0, a1, access, out);
}

bool Cache::plan_without_lock(Device *dev, uintptr_t a0, uintptr_t a1, unsigned access,
                              bool first, const WalkHint *hint, Plan *plan) noexcept
{
    if (!hint || !hint->valid || device_evicts_first(dev))
        return false;  // room for the device is made under the lock
    // The mark first: an invalidation logged after it is seen by the insert (under the lock),
    // one that ended before it is over before this miss looks at the pages, and one in
    // between is still in unmaps_ at the insert or logs its end after the mark.
    uint64_t mark = inval_count_.load(std::memory_order_acquire);
    if (seq_.load(std::memory_order_acquire) != hint->seq)
        return false;
    // No cached range overlaps the request or touches it (where the device merges touching
    // ranges), so there is nothing to absorb, nothing to upgrade and nothing another thread
    // registered meanwhile; what the walk saw holds if no writer ran since (checked after the
    // reads, as a hit does).
    Entry *below = hint->below, *above = hint->above;
    bool touching = merges_touching(dev);
    uintptr_t below_end = below ? below->end.load(std::memory_order_relaxed) : 0;
    uintptr_t above_start = above ? above->start.load(std::memory_order_relaxed) : 0;
    if (below && (below_end > a0 || (touching && below_end == a0)))
        return false;
    if (above && (above_start < a1 || (touching && above_start == a1)))
        return false;
    std::atomic_thread_fence(std::memory_order_acquire);
    if (seq_.load(std::memory_order_relaxed) != hint->seq)
        return false;
    *plan = Plan{a0, a1, access, nullptr, mark, WatchToken{}, nullptr, false, merge_, hint->seq,
                 first, hint->leaf};
    return true;
}

void Cache::count_miss_locked(const Plan &plan) noexcept
{
    if (plan.count_miss)
        add_under_lock(counts_.misses, uint64_t{1});
}

bool Cache::plan_miss(Device *dev, uintptr_t a0, uintptr_t a1, unsigned access, bool allow_merge,
                      bool first, ThreadRecord *t, Plan *plan, Reg **out,
                      const WalkHint *hint) noexcept
{
    // A miss that takes the lock twice (plan, insert) paid about a tenth of its time for the
    // first: where nothing cached is near the request, the plan needs none.
    if (allow_merge == merge_ && plan_without_lock(dev, a0, a1, access, first, hint, plan))
        return false;
    bool device_limited = false;
    TakenLimbo taken;
    {
        std::unique_lock<SpinLock> g(lock_);
        if (first)
            add_under_lock(counts_.misses, uint64_t{1});
        while (unmap_in_flight(a0, a1))
            wait_for_unmaps(g);
        for (int round = 0; round < 2; round++) {
            if (plan_locked(dev, a0, a1, access, allow_merge, t, plan, out,
                            round == 0 ? hint : nullptr))
                return true;
            size_t planned_bytes = plan->end - plan->start;
            if (plan->base || !over_limits(device_evicts_first(dev) ? dev : nullptr, planned_bytes))
                break;
            write_begin();
            evict_locked(dev, nullptr, 1, planned_bytes);
            write_end();
            // The device's own room comes back only when deregistered: now. Room in the
            // cache's own limits is there already (a batch may wait).
            device_limited = device_evicts_first(dev);
            // What went may be an entry the union absorbs: plan again without it, rather
            // than register a union that insert_plan would refuse.
            if (!invalidated_since(plan->mark, plan->start, plan->end))
                break;
        }
        plan->index_seq = seq_.load(std::memory_order_relaxed);
        if (device_limited)
            take_limbo_if_free(&taken);
    }
    if (taken.taken)
        reclaim_taken(&taken);
    else if (device_limited)
        reclaim();
    return false;
}

bool Cache::plan_locked(Device *dev, uintptr_t a0, uintptr_t a1, unsigned access,
                        bool allow_merge, ThreadRecord *t, Plan *plan, Reg **out,
                        const WalkHint *hint) noexcept
{
    *plan = Plan{a0, a1, access, nullptr, 0, WatchToken{}, nullptr, false, false, 0, false};
    // The entries below and above a0 decide both whether the range is cached and what a
    // union absorbs: one walk for all of it, or none where the failed hit's walk saw them and
    // no writer ran since.
    void *above = nullptr;
    Entry *below;
    if (hint && hint->valid && seq_.load(std::memory_order_relaxed) == hint->seq) {
        below = hint->below;
        above = hint->above;
    } else {
        below = static_cast<Entry *>(index_.floor_w(a0, &above));
    }
    if (Entry *e = covering_unchanged(below, a1)) {
        if (Reg *r = device_reg_of(e, dev)) {
            if ((reg_access(r) & access) == access) {
                // Another thread registered it meanwhile.
                take_hold(t, r);
                *out = r;
                return true;
            }
            plan->access |= reg_access(r);  // an upgrade keeps the rights it had
        }
        plan->base = e;
        plan->start = e->start.load();
        plan->end = e->end.load();
    } else if (allow_merge) {
        plan_union(dev, below, static_cast<Entry *>(above), plan);
    }
    plan->mark = inval_count_.load(std::memory_order_relaxed);
    return false;
}

void Cache::plan_union(Device *dev, Entry *below, Entry *above, Plan *plan) noexcept
{
    // The union keeps the rights this device had on what it absorbs, so that getting one of
    // those ranges again stays a hit. What overlaps the request is absorbed, as the index
    // holds no overlapping ranges; a neighbour that only touches it, while it is no larger
    // than the request. Without that bound, buffers handed out back to back each registered
    // the whole run before them again: 4096 adjacent 64 KiB gets registered 512 GiB in all,
    // 2048 times their 256 MiB, which a real device pins page by page. With it a miss
    // registers at most three times what it asked for.
    const uintptr_t a0 = plan->start;
    const size_t asked = plan->end - plan->start;
    uintptr_t u0 = plan->start, u1 = plan->end;
    unsigned merged_acc = 0;
    bool known = tracked_;  // what the union adds is cached and valid, so it is mapped
    auto absorb = [&](Entry *x) {
        for (Reg *r = x->regs.load(); r; r = r->next.load())
            if (r->dev.load() == dev)
                merged_acc |= reg_access(r);
        if (watch_changed(x))
            known = false;  // the tracker says its pages changed
    };
    bool touched = false;
    const bool touching = merges_touching(dev);  // else only what overlaps is absorbed
    Entry *p = below;
    uintptr_t p0 = p ? p->start.load() : 0, p1 = p ? p->end.load() : 0;
    if (p && (p1 > a0 || (touching && p1 == a0 && p1 - p0 <= asked))) {
        u0 = p0, u1 = p1 > u1 ? p1 : u1;
        absorb(p);
        touched = true;
    }
    for (Entry *n = above; n; n = static_cast<Entry *>(index_.ceil_w(n->start.load() + 1))) {
        uintptr_t n0 = n->start.load(), n1 = n->end.load();
        if (n0 > u1 || (n0 == u1 && (!touching || n1 - n0 > asked)))
            break;
        if (n1 > u1)
            u1 = n1;
        absorb(n);
        touched = true;
    }
    plan->touches_nothing = !touched;  // absorbed nothing: the union is the request
    if (dev->ops.max_region_bytes && u1 - u0 > dev->ops.max_region_bytes)
        return;  // too big for the device in one piece: just the request
    plan->start = u0;
    plan->end = u1;
    plan->access |= merged_acc;
    plan->union_known_mapped = known;
}

int Cache::register_plan(Device *dev, uintptr_t a0, uintptr_t a1, Plan *plan, bool *may_evict) noexcept
{
    uintptr_t u0 = plan->start, u1 = plan->end;
    if (!plan->base) {
        int rc = tracker_->watch(u0, u1 - u0, &plan->watch);
        if (rc == -ENOTSUP)
            return kMissUncached;
        if (rc == -EFAULT && (u0 < a0 || u1 > a1))
            return kMissUnmerged;  // a neighbour went away: the request alone may be mapped
        if (rc < 0)
            return rc;
    }
    // The mapped check is the device's own registration where it makes one (it then fails
    // with -EFAULT, and nothing is cached), or the watch where the tracker's does one (kmod).
    // Otherwise only what is not known to be mapped is checked: the request, or the whole
    // union if some of what it absorbs may not be, and what the cache learnt of the address
    // space may answer for it (mapped_blocks.h). A cached range registered again for more
    // rights (base) is known to be mapped.
    if (!plan->base && !device_checks_mapped(dev) && !watch_checks_mapped_) {
        bool whole = !plan->union_known_mapped;
        if (!miss_range_mapped(whole ? u0 : a0, whole ? u1 : a1)) {
            tracker_->unwatch(u0, u1 - u0, plan->watch);
            if (!whole || (u0 == a0 && u1 == a1))
                return -EFAULT;
            return kMissUnmerged;  // the union has a hole: register just the request
        }
    }
    int rc = reg_evicting(dev, u0, u1, plan->access, plan->base, may_evict, &plan->handle);
    if (rc < 0) {
        if (!plan->base)
            tracker_->unwatch(u0, u1 - u0, plan->watch);
        // A neighbour we merged with may have gone away after the mapped check, and a device
        // may say so with any error (Open MPI's BTLs say -EIO): the request alone may still
        // register. An upgrade (base) registers the cached range, not a union.
        if (!plan->base && (u0 < a0 || u1 > a1))
            return kMissUnmerged;
        return rc;
    }
    return 0;  // counted as a registration by insert_plan, under the lock
}

bool Cache::plan_still_valid(const Plan &plan) const noexcept
{
    if (unmap_in_flight(plan.start, plan.end) || invalidated_since(plan.mark, plan.start, plan.end))
        return false;
    if (!plan.base)
        return !watch_changed(plan.watch);
    // base may have been freed and reused meanwhile: it must still be this range.
    return plan.base->in_index.load(std::memory_order_relaxed) &&
           plan.base->start.load() == plan.start && plan.base->end.load() == plan.end &&
           !watch_changed(plan.base);
}

Entry *Cache::covering_unchanged(Entry *below, uintptr_t a1) const noexcept
{
    return below && below->end.load(std::memory_order_relaxed) >= a1 && !watch_changed(below)
               ? below
               : nullptr;
}

Reg *Cache::device_reg_of(const Entry *e, const Device *dev) noexcept
{
    for (Reg *r = e->regs.load(std::memory_order_relaxed); r;
         r = r->next.load(std::memory_order_relaxed))
        if (r->dev.load(std::memory_order_relaxed) == dev)
            return r;
    return nullptr;
}

// Out of line and cold: only a race between threads needs it, and the miss's common path
// stays as it was (inlined, a random miss through the UCX module measured 1-3 ns slower).
__attribute__((noinline, cold)) Reg *Cache::registered_meanwhile(Device *dev, uintptr_t a0,
                                                                 uintptr_t a1,
                                                                 unsigned access) const noexcept
{
    void *above;
    Entry *e = covering_unchanged(static_cast<Entry *>(index_.floor_w(a0, &above)), a1);
    Reg *r = e ? device_reg_of(e, dev) : nullptr;
    return r && (reg_access(r) & access) == access ? r : nullptr;
}

void Cache::give_back_plan(Device *dev, const Plan &plan, Reg *r, Entry *ne, Reg *instead,
                           ThreadRecord *t, std::unique_lock<SpinLock> &g) noexcept
{
    count_deregistration(plan.end - plan.start);
    if (r)
        regs_.free(r);
    if (ne)
        entries_.free(ne);
    if (instead)
        take_hold(t, instead);
    g.unlock();
    deregister(dev, plan.handle);
    if (!plan.base)
        tracker_->unwatch(plan.start, plan.end - plan.start, plan.watch);
}

void Cache::serve_unindexed(Reg *r, Entry *ne, const Plan &plan, bool device_evicted,
                            std::unique_lock<SpinLock> &g) noexcept
{
    reg_set_state(r, kRegUncached);
    r->shared_holds.store(1, std::memory_order_relaxed);
    count_retiring_left();
    write_end();
    g.unlock();
    tracker_->unwatch(plan.start, plan.end - plan.start, plan.watch);
    ne->watched = false;
    counts_.uncached.fetch_add(1, std::memory_order_relaxed);
    if (device_evicted)
        reclaim();
}

int Cache::insert_plan(Device *dev, uintptr_t a0, uintptr_t a1, const Plan &plan, bool allow_merge,
                       ThreadRecord *t, Reg **out) noexcept
{
    uintptr_t u0 = plan.start, u1 = plan.end;
    std::unique_lock<SpinLock> g(lock_);
    count_miss_locked(plan);
    Reg *r = regs_.alloc();
    Entry *ne = plan.base ? nullptr : entries_.alloc();
    bool no_memory = !r || (!plan.base && !ne);
    count_registration(u1 - u0);
    bool valid = !no_memory && plan_still_valid(plan);
    // An entry counts its registrations not yet freed in 16 bits: one that has as many (each
    // upgrade retires one, which waits while held) takes no more, and this get is served
    // uncached.
    bool entry_full = valid && plan.base && plan.base->regs_alive >= max_regs_alive_;
    // seq_ moves with every change of the index (hits rely on it): unmoved since the plan, the
    // index is the one the plan saw.
    bool index_as_planned = seq_.load(std::memory_order_relaxed) == plan.index_seq;
    // Another thread may have cached the request meanwhile (two threads' first gets of one
    // buffer): its registration serves this get, and this one goes back to the device, seen
    // by nobody. Inserted over it, this one retired a registration in use, which then waited
    // for a reclaim batch while every put of a threaded process took the slow path.
    Reg *meanwhile = valid && !entry_full && !plan.base && !index_as_planned
                         ? registered_meanwhile(dev, a0, a1, plan.access)
                         : nullptr;
    if (!valid || entry_full || meanwhile) {
        give_back_plan(dev, plan, r, ne, meanwhile, t, g);
        if (meanwhile) {
            *out = meanwhile;
            return 0;
        }
        return no_memory ? -ENOMEM : entry_full ? kMissUncached : kMissAgain;
    }
    write_begin();
    defer_retiring_count_ = true;
    // Soft limits: room is made before this registration counts in the device's, and after
    // the insert, which keeps the new entry (evict_locked's keep): the insert first goes
    // where the failed hit's walk ended, which an eviction before it would have changed
    // (RangeIndex::insert_at_walked). What goes waits for a batch of the device's
    // (evict_soft_locked), which is deregistered below (at once where no other thread uses
    // the cache, else after a grace period). A plan on a cached range
    // (base) makes none, as plan_miss makes none for it: an upgrade replaces the device's
    // registration there.
    r->dev.store(dev, std::memory_order_relaxed);
    r->handle.store(plan.handle, std::memory_order_relaxed);
    r->bits.store(plan.access | kRegLive << 8, std::memory_order_relaxed);
    r->shared_holds.store(0, std::memory_order_relaxed);
    Entry *target = plan.base;
    if (plan.base) {
        join_entry(dev, plan.base, r);
    } else if (insert_entry(ne, r, plan, allow_merge, index_as_planned)) {
        if (u0 < a0 || u1 > a1)
            counts_.merges.fetch_add(1, std::memory_order_relaxed);
        target = ne;
    }
    bool device_evicted = !plan.base && device_soft_limited(dev) &&
                          device_full(dev, DeviceLeaving{}, u1 - u0) &&
                          evict_soft_locked(dev, target, u1 - u0);
    dev->regions++;
    dev->bytes += u1 - u0;
    if (!target) {  // out of memory for index nodes
        serve_unindexed(r, ne, plan, device_evicted, g);
        *out = r;
        return 0;
    }
    bool steal = over_limits(nullptr, 0) && !evict_for_insert(target);
    take_hold(t, r);
    if (target == ne)
        memo_fill_inserting(dev, a0, target, r);
    write_end();
    TakenLimbo taken;
    if (limbo_urgent_.load(std::memory_order_relaxed))
        take_limbo_if_free(&taken);
    count_retiring_left();
    g.unlock();
    if (steal)
        steal_one();
    // What the device's soft limit evicted goes now where no other thread uses the cache
    // (taken above), else with the next pass whose grace period has passed: a reclaim that
    // must finish here made a membarrier at every miss of a threaded process (two threads at
    // a UCX rcache's max_regions: 0.25x the misses of one).
    if (taken.taken)
        reclaim_taken(&taken);
    else if (device_evicted)
        reclaim_soon();
    else
        reclaim_if_due();
    *out = r;
    return 0;
}

void Cache::join_entry(Device *dev, Entry *base, Reg *r) noexcept
{
    // Upgrade (or a new device on a cached range): the device's old one retires.
    bool upgraded = false;
    Reg *others = retire_device_regs(base, dev, &upgraded);
    if (upgraded)
        counts_.upgrades.fetch_add(1, std::memory_order_relaxed);
    r->next.store(others, std::memory_order_relaxed);
    r->entry.store(base, std::memory_order_relaxed);
    base->regs.store(r, std::memory_order_release);
    base->regs_alive++;
}

bool Cache::insert_entry(Entry *ne, Reg *r, const Plan &plan, bool allow_merge,
                         bool index_as_planned) noexcept
{
    uintptr_t u0 = plan.start, u1 = plan.end;
    // Everything the new range overlaps leaves the index (what the union absorbed is inside
    // it; a neighbour it left out only touches it). Where the plan absorbed nothing and the
    // index is as planned, there is nothing to look for.
    bool as_walked = allow_merge && plan.touches_nothing && index_as_planned;
    if (!as_walked)
        remove_overlapping(u0, u1, false);
    ne->start.store(u0, std::memory_order_relaxed);
    ne->end.store(u1, std::memory_order_relaxed);
    ne->watch_handle.store(plan.watch.handle, std::memory_order_relaxed);
    ne->watch_expect.store(plan.watch.expect, std::memory_order_relaxed);
    ne->used.store(0, std::memory_order_relaxed);
    ne->memo_slots.store(0, std::memory_order_relaxed);
    ne->regs_alive = 1;
    ne->watched = unwatch_needed_;
    r->next.store(nullptr, std::memory_order_relaxed);
    r->entry.store(ne, std::memory_order_relaxed);
    ne->regs.store(r, std::memory_order_release);
    // As planned, the failed hit's walk found the leaf where u0 goes, if it gave one (a0's
    // page start has the neighbours of the address it walked for, and a plan that absorbed
    // nothing is the request: u0 == a0). Evictions for limits come after the insert.
    if (!(as_walked ? index_.insert_at_walked(plan.leaf, u0, ne) : index_.insert(u0, ne))) {
        ne->in_index.store(false, std::memory_order_relaxed);
        return false;
    }
    ne->in_index.store(true, std::memory_order_relaxed);
    // With lanes, a range past its first granule gives this lane the others that nobody owns
    // (the get's own granule was given at its start: claim_granule). totals_ is on a line the
    // miss reads anyway; lane_owner_ is not.
    if (totals_ && (u0 >> kGranuleShift) != ((u1 - 1) >> kGranuleShift))
        claim_granules(u0, u1);
    lru_push_head(ne);
    entry_count_++;
    bytes_cached_ += u1 - u0;
    return true;
}

}  // namespace vmt
