/* Armed watches (arms.h). */
#include "arms.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "ranges.h"
#include "vmtrack.h"

/* Starts at 1, and a thread's mark at 0: a thread that never left a monitor call has nothing
 * armed before its registration. */
static _Atomic uint64_t arm_clock = 1;
static __thread uint64_t t_mark;
/* The watch cache's change log at this thread's last call (t_log_cache: the cache it was
 * taken on, NULL: none). */
static __thread uint64_t t_log_mark;
static __thread struct vmt_cache *t_log_cache;

static size_t index_of(const struct vmt_ofi_arms *a, uintptr_t addr, size_t len)
{
    return (size_t)(vmt_ofi_range_hash(addr, len) & (a->n - 1));
}

int vmt_ofi_arms_init(struct vmt_ofi_arms *a, size_t n)
{
    size_t size = 1;
    while (size < n && size < (1u << 20))
        size <<= 1;
    a->v = calloc(size, sizeof(*a->v));
    if (!a->v)
        return -ENOMEM;
    a->n = size;
    pthread_mutex_init(&a->lock, NULL);
    return 0;
}

void vmt_ofi_arms_fini(struct vmt_ofi_arms *a)
{
    if (!a->v)
        return;
    for (size_t i = 0; i < a->n; i++)
        if (a->v[i].watch)
            vmt_put(a->v[i].watch);
    free(a->v);
    a->v = NULL;
    pthread_mutex_destroy(&a->lock);
}

/* Arm watch in e (under the lock); returns the hold to release: the one replaced, or the
 * caller's when this very watch was armed already (its tick stays the earlier one). */
static struct vmt_reg *arm_locked(struct vmt_ofi_arm *e, uintptr_t addr, size_t len,
                                  struct vmt_reg *watch)
{
    if (e->watch == watch && e->addr == addr && e->len == len)
        return watch;
    struct vmt_reg *old = e->watch;
    e->addr = addr;
    e->len = len;
    e->watch = watch;
    /* Taken after the watch was: a thread whose mark reaches it left its call later. */
    e->tick = atomic_fetch_add_explicit(&arm_clock, 1, memory_order_acq_rel) + 1;
    return old;
}

bool vmt_ofi_arms_trust(struct vmt_ofi_arms *a, uintptr_t addr, size_t len,
                       struct vmt_reg *watch)
{
    pthread_mutex_lock(&a->lock);
    struct vmt_ofi_arm *e = &a->v[index_of(a, addr, len)];
    if (e->watch == watch && e->addr == addr && e->len == len && e->tick <= t_mark) {
        pthread_mutex_unlock(&a->lock);
        return true;
    }
    struct vmt_reg *old = arm_locked(e, addr, len, watch);
    pthread_mutex_unlock(&a->lock);
    if (old)
        vmt_put(old);
    return false;
}

void vmt_ofi_arms_set(struct vmt_ofi_arms *a, uintptr_t addr, size_t len, struct vmt_reg *watch)
{
    pthread_mutex_lock(&a->lock);
    struct vmt_reg *old = arm_locked(&a->v[index_of(a, addr, len)], addr, len, watch);
    pthread_mutex_unlock(&a->lock);
    if (old)
        vmt_put(old);
}

void vmt_ofi_arms_call_ends(struct vmt_cache *wcache)
{
    t_mark = atomic_load_explicit(&arm_clock, memory_order_acquire);
    t_log_cache = wcache && vmt_changes_mark(wcache, &t_log_mark) == 0 ? wcache : NULL;
}

bool vmt_ofi_unchanged_since_call(struct vmt_cache *wcache, uintptr_t addr, size_t len)
{
    return wcache && t_log_cache == wcache &&
           vmt_changed_since(wcache, t_log_mark, (const void *)addr, len) == 0;
}
