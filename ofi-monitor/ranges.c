/* The subscribed-range table (ranges.h): open buckets of VMT_OFI_WAYS slots, each slot under
 * a sequence count so that valid() can read it without the lock. */
#include "ranges.h"

#include <errno.h>
#include <stdlib.h>

#include "vmtrack.h"

#define TOKEN_SEQ_BITS 40
#define TOKEN_SEQ_MASK ((1ull << TOKEN_SEQ_BITS) - 1)
#define READ_TRIES 16

static size_t bucket_of(const struct vmt_ofi_ranges *t, uintptr_t addr, size_t len)
{
    return (size_t)(vmt_ofi_range_hash(addr, len) & (t->buckets - 1));
}

static struct vmt_ofi_slot *slot_at(struct vmt_ofi_ranges *t, size_t bucket, unsigned way)
{
    return &t->slots[bucket * VMT_OFI_WAYS + way];
}

static bool overlaps(uintptr_t a, size_t alen, uintptr_t b, size_t blen)
{
    if (alen == SIZE_MAX || blen == SIZE_MAX)
        return true;
    return a < b + blen && b < a + alen;
}

/* Writers (under lock) open and close a change with these two. */
static void write_begin(struct vmt_ofi_slot *s)
{
    atomic_fetch_add_explicit(&s->seq, 1, memory_order_relaxed);
    atomic_thread_fence(memory_order_release);
}

static void write_end(struct vmt_ofi_slot *s)
{
    atomic_fetch_add_explicit(&s->seq, 1, memory_order_release);
}

int vmt_ofi_ranges_init(struct vmt_ofi_ranges *t, size_t max_ranges)
{
    size_t buckets = 1;
    while (buckets * VMT_OFI_WAYS < max_ranges && buckets < (1u << 20))
        buckets <<= 1;
    t->slots = calloc(buckets * VMT_OFI_WAYS, sizeof(*t->slots));
    if (!t->slots)
        return -ENOMEM;
    t->buckets = buckets;
    pthread_mutex_init(&t->lock, NULL);
    t->births = 0;
    atomic_init(&t->used, 0);
    atomic_init(&t->evictions, 0);
    atomic_init(&t->lo, UINTPTR_MAX);
    atomic_init(&t->hi, 0);
    return 0;
}

static void empty_slot(struct vmt_ofi_ranges *t, struct vmt_ofi_slot *s)
{
    struct vmt_reg *w = atomic_load_explicit(&s->watch, memory_order_relaxed);
    write_begin(s);
    atomic_store_explicit(&s->watch, NULL, memory_order_relaxed);
    atomic_store_explicit(&s->dead, 0, memory_order_relaxed);
    s->refs = 0;
    s->ticket = 0;
    write_end(s);
    atomic_fetch_sub_explicit(&t->used, 1, memory_order_relaxed);
    vmt_put(w);
}

void vmt_ofi_ranges_fini(struct vmt_ofi_ranges *t)
{
    if (!t->slots)
        return;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->buckets * VMT_OFI_WAYS; i++)
        if (atomic_load_explicit(&t->slots[i].watch, memory_order_relaxed))
            empty_slot(t, &t->slots[i]);
    pthread_mutex_unlock(&t->lock);
    free(t->slots);
    t->slots = NULL;
    pthread_mutex_destroy(&t->lock);
}

static void widen(struct vmt_ofi_ranges *t, uintptr_t addr, size_t len)
{
    uintptr_t lo = atomic_load_explicit(&t->lo, memory_order_relaxed);
    uintptr_t hi = atomic_load_explicit(&t->hi, memory_order_relaxed);
    if (addr < lo)
        atomic_store_explicit(&t->lo, addr, memory_order_seq_cst);
    if (addr + len > hi)
        atomic_store_explicit(&t->hi, addr + len, memory_order_seq_cst);
}

static void fill_slot(struct vmt_ofi_ranges *t, struct vmt_ofi_slot *s, uintptr_t addr,
                      size_t len, struct vmt_reg *watch)
{
    widen(t, addr, len);   /* before the slot is visible: events are filtered by lo/hi */
    write_begin(s);
    atomic_store_explicit(&s->addr, addr, memory_order_relaxed);
    atomic_store_explicit(&s->len, len, memory_order_relaxed);
    atomic_store_explicit(&s->dead, 0, memory_order_relaxed);
    atomic_store_explicit(&s->watch, watch, memory_order_relaxed);
    s->refs = 1;
    s->born = ++t->births;
    s->ticket = 0;
    write_end(s);
    atomic_fetch_add_explicit(&t->used, 1, memory_order_relaxed);
}

static struct vmt_ofi_slot *find_locked(struct vmt_ofi_ranges *t, size_t b, uintptr_t addr,
                                        size_t len)
{
    for (unsigned w = 0; w < VMT_OFI_WAYS; w++) {
        struct vmt_ofi_slot *s = slot_at(t, b, w);
        if (atomic_load_explicit(&s->watch, memory_order_relaxed) &&
            atomic_load_explicit(&s->addr, memory_order_relaxed) == addr &&
            atomic_load_explicit(&s->len, memory_order_relaxed) == len)
            return s;
    }
    return NULL;
}

/* The oldest slot of the bucket not already waiting for a notify; NULL if all are. */
static struct vmt_ofi_slot *victim_locked(struct vmt_ofi_ranges *t, size_t b)
{
    struct vmt_ofi_slot *v = NULL;
    for (unsigned w = 0; w < VMT_OFI_WAYS; w++) {
        struct vmt_ofi_slot *s = slot_at(t, b, w);
        if (atomic_load_explicit(&s->dead, memory_order_relaxed))
            continue;
        if (!v || s->born < v->born)
            v = s;
    }
    return v;
}

enum vmt_ofi_add vmt_ofi_ranges_add(struct vmt_ofi_ranges *t, uintptr_t addr, size_t len,
                                    struct vmt_reg *watch, uintptr_t *vaddr, size_t *vlen)
{
    size_t b = bucket_of(t, addr, len);
    enum vmt_ofi_add res = VMT_OFI_ADDED;
    pthread_mutex_lock(&t->lock);
    struct vmt_ofi_slot *s = find_locked(t, b, addr, len);
    if (s) {
        if (atomic_load_explicit(&s->dead, memory_order_relaxed) ||
            atomic_load_explicit(&s->watch, memory_order_relaxed) != watch) {
            /* Another domain may still cache an entry subscribed under the old watch: the
             * range must be notified before it can be cached again. */
            atomic_store_explicit(&s->dead, 1, memory_order_release);
            res = VMT_OFI_DEAD;
        } else {
            s->refs++;
            res = VMT_OFI_SHARED;
        }
        goto out;
    }
    for (unsigned w = 0; w < VMT_OFI_WAYS; w++) {
        s = slot_at(t, b, w);
        if (!atomic_load_explicit(&s->watch, memory_order_relaxed)) {
            fill_slot(t, s, addr, len, watch);
            goto out;
        }
    }
    res = VMT_OFI_FULL;
    s = victim_locked(t, b);
    if (s) {
        atomic_store_explicit(&s->dead, 1, memory_order_release);
        atomic_fetch_add_explicit(&t->evictions, 1, memory_order_relaxed);
        *vaddr = atomic_load_explicit(&s->addr, memory_order_relaxed);
        *vlen = atomic_load_explicit(&s->len, memory_order_relaxed);
    } else {
        *vaddr = addr;   /* every slot already waits for its notify */
        *vlen = len;
    }
out:
    pthread_mutex_unlock(&t->lock);
    return res;
}

bool vmt_ofi_ranges_release(struct vmt_ofi_ranges *t, uintptr_t addr, size_t len)
{
    bool last = false;
    pthread_mutex_lock(&t->lock);
    struct vmt_ofi_slot *s = find_locked(t, bucket_of(t, addr, len), addr, len);
    if (s && s->refs > 0 && --s->refs == 0) {
        atomic_store_explicit(&s->dead, 1, memory_order_release);
        last = true;
    }
    pthread_mutex_unlock(&t->lock);
    return last;
}

bool vmt_ofi_ranges_find(struct vmt_ofi_ranges *t, uintptr_t addr, size_t len,
                         struct vmt_reg **watch, uint64_t *token)
{
    size_t b = bucket_of(t, addr, len);
    for (unsigned w = 0; w < VMT_OFI_WAYS; w++) {
        struct vmt_ofi_slot *s = slot_at(t, b, w);
        for (int tries = 0; tries < READ_TRIES; tries++) {
            uint64_t seq = atomic_load_explicit(&s->seq, memory_order_acquire);
            if (seq & 1)
                continue;
            uintptr_t a = atomic_load_explicit(&s->addr, memory_order_relaxed);
            size_t l = atomic_load_explicit(&s->len, memory_order_relaxed);
            struct vmt_reg *r = atomic_load_explicit(&s->watch, memory_order_relaxed);
            int dead = atomic_load_explicit(&s->dead, memory_order_relaxed);
            atomic_thread_fence(memory_order_acquire);
            if (atomic_load_explicit(&s->seq, memory_order_relaxed) != seq)
                continue;
            if (!r || a != addr || l != len)
                break;
            if (dead)
                return false;
            *watch = r;
            *token = ((uint64_t)(b * VMT_OFI_WAYS + w) << TOKEN_SEQ_BITS) | (seq & TOKEN_SEQ_MASK);
            return true;
        }
    }
    return false;
}

static struct vmt_ofi_slot *token_slot(struct vmt_ofi_ranges *t, uint64_t token)
{
    return &t->slots[token >> TOKEN_SEQ_BITS];
}

bool vmt_ofi_ranges_unchanged(struct vmt_ofi_ranges *t, uint64_t token)
{
    struct vmt_ofi_slot *s = token_slot(t, token);
    atomic_thread_fence(memory_order_acquire);
    uint64_t seq = atomic_load_explicit(&s->seq, memory_order_relaxed);
    return (seq & TOKEN_SEQ_MASK) == (token & TOKEN_SEQ_MASK) &&
           !atomic_load_explicit(&s->dead, memory_order_acquire);
}

void vmt_ofi_ranges_kill(struct vmt_ofi_ranges *t, uint64_t token)
{
    struct vmt_ofi_slot *s = token_slot(t, token);
    /* A slot refilled since the lookup is killed too: conservative, and rare. */
    atomic_store_explicit(&s->dead, 1, memory_order_release);
}

bool vmt_ofi_ranges_maybe(struct vmt_ofi_ranges *t, uintptr_t addr, size_t len)
{
    uintptr_t lo = atomic_load_explicit(&t->lo, memory_order_seq_cst);
    uintptr_t hi = atomic_load_explicit(&t->hi, memory_order_seq_cst);
    return lo < hi && overlaps(addr, len, lo, hi - lo);
}

size_t vmt_ofi_ranges_doom(struct vmt_ofi_ranges *t, uintptr_t addr, size_t len, uint64_t pass)
{
    size_t n = 0;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->buckets * VMT_OFI_WAYS; i++) {
        struct vmt_ofi_slot *s = &t->slots[i];
        if (!atomic_load_explicit(&s->watch, memory_order_relaxed) ||
            !overlaps(addr, len, atomic_load_explicit(&s->addr, memory_order_relaxed),
                      atomic_load_explicit(&s->len, memory_order_relaxed)))
            continue;
        atomic_store_explicit(&s->dead, 1, memory_order_release);
        s->ticket = pass;
        n++;
    }
    pthread_mutex_unlock(&t->lock);
    return n;
}

size_t vmt_ofi_ranges_sweep(struct vmt_ofi_ranges *t, uint64_t pass)
{
    size_t n = 0;
    pthread_mutex_lock(&t->lock);
    for (size_t i = 0; i < t->buckets * VMT_OFI_WAYS; i++) {
        struct vmt_ofi_slot *s = &t->slots[i];
        if (atomic_load_explicit(&s->watch, memory_order_relaxed) && s->ticket == pass) {
            empty_slot(t, s);
            n++;
        }
    }
    pthread_mutex_unlock(&t->lock);
    return n;
}

size_t vmt_ofi_ranges_used(struct vmt_ofi_ranges *t)
{
    return atomic_load_explicit(&t->used, memory_order_relaxed);
}
