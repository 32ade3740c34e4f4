/* The ranges libfabric subscribed, each with the vmtrack watch it was subscribed under.
 *
 * valid() gets only (addr, len) from libfabric, not the cache entry, and several domains may
 * hold entries for the same range. So a range keeps the watch (a registration on vmtrack's
 * private watch cache, held) it was first subscribed under, and never gets another one while
 * an entry subscribed under the old one may still be in a libfabric cache. The one rule that
 * makes that true: a slot is emptied only by the notifier, after a notify over its range that
 * began after the slot was marked dead (doc/ofi.md, "no stale hit").
 *
 * Fixed size (buckets of VMT_OFI_WAYS slots, chosen by a hash of the range): libfabric 1.17
 * never unsubscribes, so nothing here may grow. Lookups take no lock (per-slot sequence count);
 * changes take `lock`, which is never held while calling libfabric or waiting for it. */
#ifndef VMTRACK_OFI_RANGES_H
#define VMTRACK_OFI_RANGES_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct vmt_reg;

#define VMT_OFI_WAYS 8u

/* Where a range goes in a table of 2^k places (the ranges' buckets, the arms' slots). */
static inline uint64_t vmt_ofi_range_hash(uintptr_t addr, size_t len)
{
    uint64_t h = ((uint64_t)addr >> 12) * 0x9e3779b97f4a7c15ull;
    h ^= (uint64_t)len * 0xc2b2ae3d27d4eb4full;
    return h ^ (h >> 29);
}

struct vmt_ofi_slot {
    _Atomic uint64_t seq;              /* odd while a writer changes the slot */
    _Atomic uintptr_t addr;
    _Atomic size_t len;
    _Atomic(struct vmt_reg *) watch;   /* NULL: the slot is empty */
    _Atomic int dead;                  /* valid() answers false; emptied after a notify */
    unsigned refs;                     /* subscribes minus unsubscribes (under lock) */
    uint64_t born;                     /* insertion order, for eviction (under lock) */
    uint64_t ticket;                   /* notify pass that will empty it, 0: none (under lock) */
};

struct vmt_ofi_ranges {
    struct vmt_ofi_slot *slots;
    size_t buckets;                    /* a power of two */
    pthread_mutex_t lock;
    uint64_t births;                   /* under lock */
    _Atomic size_t used;
    _Atomic size_t evictions;
    _Atomic uintptr_t lo, hi;          /* every slot ever filled lies inside [lo, hi) */
};

enum vmt_ofi_add {
    VMT_OFI_ADDED,      /* a new slot holds the watch */
    VMT_OFI_SHARED,     /* the range was subscribed under this very watch: one more reference */
    VMT_OFI_DEAD,       /* the range is dead or its watch changed: not cacheable until notified */
    VMT_OFI_FULL,       /* bucket full: *victim (marked dead) must be notified; not cacheable */
};

int  vmt_ofi_ranges_init(struct vmt_ofi_ranges *t, size_t max_ranges);
void vmt_ofi_ranges_fini(struct vmt_ofi_ranges *t);   /* releases every watch */

/* subscribe: the caller holds `watch` (one hold); VMT_OFI_ADDED keeps it, anything else leaves
 * it to the caller. On VMT_OFI_FULL, [*vaddr, *vaddr+*vlen) is the evicted range. */
enum vmt_ofi_add vmt_ofi_ranges_add(struct vmt_ofi_ranges *t, uintptr_t addr, size_t len,
                                    struct vmt_reg *watch, uintptr_t *vaddr, size_t *vlen);

/* unsubscribe: one reference less. Returns true when that was the last one: the slot is now
 * dead and the caller must queue a notify for the range. */
bool vmt_ofi_ranges_release(struct vmt_ofi_ranges *t, uintptr_t addr, size_t len);

/* valid(): without a lock. Fills *watch and a token for vmt_ofi_ranges_unchanged, or returns
 * false when no live slot holds exactly this range. */
bool vmt_ofi_ranges_find(struct vmt_ofi_ranges *t, uintptr_t addr, size_t len,
                         struct vmt_reg **watch, uint64_t *token);
bool vmt_ofi_ranges_unchanged(struct vmt_ofi_ranges *t, uint64_t token);
void vmt_ofi_ranges_kill(struct vmt_ofi_ranges *t, uint64_t token);   /* without a lock */

/* Could [addr, addr+len) overlap a subscribed range? (false: certainly not) */
bool vmt_ofi_ranges_maybe(struct vmt_ofi_ranges *t, uintptr_t addr, size_t len);

/* The notifier, before a notify of [addr, addr+len): marks every slot overlapping it dead and
 * tags it with `pass`; returns how many. After the notify returned: empty the tagged slots
 * (their watches are released). With len == SIZE_MAX every slot is concerned. */
size_t vmt_ofi_ranges_doom(struct vmt_ofi_ranges *t, uintptr_t addr, size_t len, uint64_t pass);
size_t vmt_ofi_ranges_sweep(struct vmt_ofi_ranges *t, uint64_t pass);

size_t vmt_ofi_ranges_used(struct vmt_ofi_ranges *t);

#endif
