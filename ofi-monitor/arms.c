/* Armed watches (arms.h). */
#include "arms.h"

#include <errno.h>
#include <stdatomic.h>
#include <stdlib.h>

#include "vmtrack.h"

/* Starts at 1, and a thread's mark at 0: a thread that never left a monitor call has nothing
 * armed before its registration. */
static _Atomic uint64_t arm_clock = 1;
static __thread uint64_t t_mark;

static size_t index_of(const struct vmt_ofi_arms *a, uintptr_t addr, size_t len)
{
    uint64_t h = ((uint64_t)addr >> 12) * 0x9e3779b97f4a7c15ull;
    h ^= (uint64_t)len * 0xc2b2ae3d27d4eb4full;
    h ^= h >> 31;
    return (size_t)(h & (a->n - 1));
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

bool vmt_ofi_arms_ready(struct vmt_ofi_arms *a, uintptr_t addr, size_t len,
                        const struct vmt_reg *watch)
{
    pthread_mutex_lock(&a->lock);
    const struct vmt_ofi_arm *e = &a->v[index_of(a, addr, len)];
    bool ready = e->watch && e->watch == watch && e->addr == addr && e->len == len &&
                 e->tick <= t_mark;
    pthread_mutex_unlock(&a->lock);
    return ready;
}

void vmt_ofi_arms_set(struct vmt_ofi_arms *a, uintptr_t addr, size_t len, struct vmt_reg *watch)
{
    struct vmt_reg *old;
    pthread_mutex_lock(&a->lock);
    struct vmt_ofi_arm *e = &a->v[index_of(a, addr, len)];
    if (e->watch == watch && e->addr == addr && e->len == len) {
        old = watch;   /* armed already: its tick stays the earlier one */
    } else {
        old = e->watch;
        e->addr = addr;
        e->len = len;
        e->watch = watch;
        /* Taken after the watch was: a thread whose mark reaches it left its call later. */
        e->tick = atomic_fetch_add_explicit(&arm_clock, 1, memory_order_acq_rel) + 1;
    }
    pthread_mutex_unlock(&a->lock);
    if (old)
        vmt_put(old);
}

void vmt_ofi_arms_call_ends(void)
{
    t_mark = atomic_load_explicit(&arm_clock, memory_order_acquire);
}
