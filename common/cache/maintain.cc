// One registration or one device at a time: vmt_reg_invalidate and vmt_device_flush. A cache
// shared by several stacks needs them where one stack's cache used to be alone: UCX's
// ucs_rcache_region_invalidate drops one region, not every stack's registrations of the range;
// its PURGE_ON_FORK deregisters that rcache's unused regions, not the whole process's.
#include <cerrno>

#include "cache/internal.h"

namespace vmt {

int Cache::invalidate_reg(Reg *target)
{
    maybe_after_fork();
    {
        std::lock_guard<SpinLock> g(lock_);
        if (reg_state(target) != kRegLive)
            return 0;  // out of the index already (retired, or never cached)
        Entry *e = target->entry.load(std::memory_order_relaxed);
        write_begin();
        Reg *keep = nullptr, **tail = &keep;
        for (Reg *r = e->regs.load(std::memory_order_relaxed), *next; r; r = next) {
            next = r->next.load(std::memory_order_relaxed);
            if (r == target) {
                retire(r);
            } else {
                r->next.store(nullptr, std::memory_order_relaxed);
                *tail = r;
                tail = reinterpret_cast<Reg **>(&r->next);
            }
        }
        e->regs.store(keep, std::memory_order_release);
        if (!keep)
            remove_entry(e);
        write_end();
    }
    reclaim();  // the caller holds target; only what an earlier retirement left goes now
    return 0;
}

void Cache::retire_all_of(Device *dev) noexcept
{
    Entry *last = lru_tail_;  // the LRU list is a ring: once round, from the head
    for (Entry *e = lru_head_, *next; e; e = next) {
        next = e == last ? nullptr : e->lru_next;
        bool retired;
        Reg *keep = retire_device_regs(e, dev, &retired);
        e->regs.store(keep, std::memory_order_release);
        if (!keep)
            remove_entry(e);
    }
}

int Cache::flush_device_lane(Device *dev) noexcept
{
    maybe_after_fork();
    {
        std::lock_guard<SpinLock> g(lock_);
        if (dev->detached.load() || dev->forked_away)
            return -EINVAL;
        write_begin();
        retire_all_of(dev);
        write_end();
    }
    reclaim_settled();
    return 0;
}

}  // namespace vmt
