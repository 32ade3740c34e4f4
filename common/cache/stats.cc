// vmt_cache_stats: the counters as one snapshot. Hits are counted per thread (holds.h) for
// the first kFastStatCaches caches and in a shared counter for the rest; everything else is
// in Cache::Counters. A snapshot is not atomic across counters: each one is exact, their sum
// at one instant is not promised. The one exception is entries, read with every lane's lock
// held at once: read lane after lane, an entry one lane evicts for another's miss
// (steal_one) can be counted in both, and a sample then reads past the limit the cache keeps.
#include "config.h"
#include "cache/cache.h"

#include <cstring>

namespace vmt {

// This lane's counters, added to *v (its hits are the head's: lanes share its counter slot).
void Cache::stats_lane(struct vmt_stats *v) noexcept
{
    v->hits += counts_.hits_shared.load();
    v->misses += counts_.misses.load();
    v->registrations += counts_.registrations.load();
    v->deregistrations += counts_.deregistrations.load();
    v->invalidations += counts_.invalidations.load();
    v->evictions += counts_.evictions.load();
    v->bytes_registered += counts_.bytes_registered.load();
    v->uncached += counts_.uncached.load();
    v->merges += counts_.merges.load();
    v->upgrades += counts_.upgrades.load();
    v->retries += counts_.retries.load();
    v->deferred += counts_.deferred.load();
    v->memo_wraps += counts_.memo_wraps.load();
    v->retired_waiting += limbo_total_.load();
    v->reclaim_passes += counts_.reclaim_passes.load();
    v->reclaim_barriers += counts_.reclaim_barriers.load();
}

// In lane order, as pause_hits takes them; no path holds one lane's lock and waits for
// another's, so this cannot deadlock against a miss, a steal or an invalidation.
size_t Cache::entries_in_all_lanes() noexcept
{
    for (unsigned i = 0; i < nlanes_; i++)
        lanes_[i]->lock_.lock();
    size_t entries = 0;
    for (unsigned i = 0; i < nlanes_; i++)
        entries += lanes_[i]->entry_count_;
    for (unsigned i = nlanes_; i-- > 0;)
        lanes_[i]->lock_.unlock();
    return entries;
}

void Cache::stats(struct vmt_stats *s)
{
    struct vmt_stats v;
    memset(&v, 0, sizeof v);
    v.sz = sizeof v;
    if (stat_slot_ < kFastStatCaches) {
        v.memo_hits = hits_in_threads(stat_slot_, false);
        v.hits = v.memo_hits + hits_in_threads(stat_slot_, true);
    }
    for (unsigned i = 0; i < nlanes_; i++)
        lanes_[i]->stats_lane(&v);
    v.entries = entries_in_all_lanes();
    v.max_entries = max_entries_;
    v.max_bytes = max_bytes_;
    v.lanes = nlanes_;
    size_t n = s->sz < sizeof v ? s->sz : sizeof v;
    size_t caller_sz = s->sz;
    memcpy(s, &v, n);
    s->sz = caller_sz;
}

}  // namespace vmt
