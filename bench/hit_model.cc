/*
 * How far vmt_get's memo hit is from the least a memo hit can do on this CPU:
 * ./bench/hit_model [HITS]
 *
 * The model keeps what no memo hit can leave out: the same 64-byte slot and hash as the
 * library's memo (common/cache/hit.cc), the slot's stamp, tag, end and access checked, the
 * hold published in a per-thread slot, the stamp and the epoch read again after it, a per-thread
 * hit counter, and a put that takes the hold back. It leaves out what the library adds on top:
 * the device's indirections (its memo, tag, cache and counter offset), the lane and validity-word
 * tests, the memo's live bits, the sampled recency write, a thread record reached through the
 * shared library's TLS, and a rare path that needs the arguments kept (the model returns).
 *
 * Both loops run the bench's hit workload (1024 regions of 64 KiB at random, through two calls
 * by pointer), alternated; the figures are medians of the rounds, and of the rounds' ratios.
 * The model is a yardstick for changes to the hit path, not a target: it cannot miss.
 */
#include <sys/mman.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <vector>

#include <vmtrack.h>

#include "bench_util.h"

using vmt_bench::median;
using vmt_bench::null_dereg;
using vmt_bench::null_reg;
using vmt_bench::thread_cpu_ns;

#define REGIONS 1024u
#define REGION_BYTES (64u * 1024u)
#define STRIDE (128u * 1024u)
#define MEMO_SLOTS 32768u
#define ROUNDS 9
#define INDICES (1u << 16)

struct model_slot {
    uint64_t stamp, tag, end, entry, hold;
    uint32_t denied, watch_handle, watch_expect, way1_hint;
    void *handle;
} __attribute__((aligned(64)));

struct model_thread {
    uint64_t holds[32];
    uint64_t hits;
};

static struct model_slot *model_memo;
static uint64_t model_epoch = 2;
static __thread struct model_thread model_thread;

static size_t model_set(uint64_t tag)
{
    tag ^= tag >> 11;
    return (size_t)((tag * 0x9E3779B97F4A7C15ull) >> 50) * 2;
}

__attribute__((noinline)) static int model_get(struct vmt_device *dev, const void *addr,
                                               size_t len, unsigned access, struct vmt_reg **out)
{
    uintptr_t a = (uintptr_t)addr;
    if (!dev || !out || a + len <= a)
        return -1;
    uint64_t tag = a >> 12;
    struct model_slot *m = &model_memo[model_set(tag)];
    uint64_t epoch = __atomic_load_n(&model_epoch, __ATOMIC_ACQUIRE);
    uint64_t stamp = __atomic_load_n(&m->stamp, __ATOMIC_ACQUIRE);
    if ((uint32_t)stamp != (uint32_t)epoch || m->tag != tag || m->end - a < len ||
        (access & m->denied))
        return -1;
    uint64_t hold = m->hold;
    __atomic_thread_fence(__ATOMIC_ACQUIRE);
    if (__atomic_load_n(&m->stamp, __ATOMIC_RELAXED) != stamp)
        return -1;
    uint64_t *slot = &model_thread.holds[(hold >> 3) & 31];
    if (*slot & 7)
        return -1;
    *slot = hold;
    __atomic_signal_fence(__ATOMIC_SEQ_CST);
    if (__atomic_load_n(&model_epoch, __ATOMIC_ACQUIRE) != epoch ||
        __atomic_load_n(&m->stamp, __ATOMIC_ACQUIRE) != stamp) {
        *slot = 0;
        return -1;
    }
    __atomic_store_n(&model_thread.hits, model_thread.hits + 1, __ATOMIC_RELAXED);
    *out = reinterpret_cast<struct vmt_reg *>(hold & ~7ull);
    return 0;
}

__attribute__((noinline)) static void model_put(struct vmt_reg *reg)
{
    uint64_t *slot = &model_thread.holds[((uintptr_t)reg >> 3) & 31];
    if ((*slot & ~7ull) == (uintptr_t)reg)
        *slot = 0;
}

typedef int (*get_fn)(struct vmt_device *, const void *, size_t, unsigned, struct vmt_reg **);
typedef void (*put_fn)(struct vmt_reg *);

/* ns per get+put of the workload; -1 if a get failed */
static double run_loop(get_fn volatile get, put_fn volatile put, struct vmt_device *dev,
                       const char *base, const uint32_t *ix, size_t hits)
{
    double t0 = thread_cpu_ns();
    for (size_t i = 0; i < hits; i++) {
        struct vmt_reg *r;
        if (get(dev, base + (size_t)ix[i & (INDICES - 1)] * STRIDE, REGION_BYTES,
                VMT_ACCESS_READ, &r))
            return -1;
        put(r);
    }
    return (thread_cpu_ns() - t0) / (double)hits;
}

/* The regions whose first-way slot the model could give them (no other region's): both loops
 * hit these only. nullptr if out of memory. */
static uint32_t *model_fill(const char *base, uint64_t *regs)
{
    uint32_t *ix = static_cast<uint32_t *>(malloc(INDICES * sizeof(*ix)));
    uint32_t owned[REGIONS], n = 0;
    if (!ix)
        return nullptr;
    for (uint32_t i = 0; i < REGIONS; i++) {
        uintptr_t a = (uintptr_t)(base + (size_t)i * STRIDE);
        struct model_slot *m = &model_memo[model_set(a >> 12)];
        if (m->stamp)
            continue;
        m->stamp = model_epoch;
        m->tag = a >> 12;
        m->end = a + REGION_BYTES;
        m->hold = (uintptr_t)&regs[i * 8] | 1;
        owned[n++] = i;
    }
    srand(1);
    for (uint32_t i = 0; i < INDICES; i++)
        ix[i] = owned[(uint32_t)rand() % n];
    return ix;
}

static int open_cache(struct vmt_cache **cache, struct vmt_device **dev)
{
    VMT_OPTS(vmt_cache_opts, o, .tracker = "none", .max_entries = REGIONS + 1024,
             .max_bytes = (size_t)1 << 50);
    int rc = vmt_cache_create(&o, cache);
    if (rc)
        return rc;
    VMT_OPTS(vmt_device_ops, ops, .name = "null", .reg = null_reg, .dereg = null_dereg);
    static struct vmt_device_ops kept;
    kept = ops;
    return vmt_device_attach(*cache, &kept, nullptr, dev);
}

int main(int argc, char **argv)
{
    size_t hits = argc > 1 ? strtoull(argv[1], nullptr, 0) : 10000000;
    struct vmt_cache *cache = nullptr;
    struct vmt_device *dev = nullptr;
    int rc = open_cache(&cache, &dev);
    if (rc) {
        fprintf(stderr, "hit_model: cannot open a cache: %s\n", vmt_strerror(rc));
        return 1;
    }
    void *memo = mmap(nullptr, 2 * MEMO_SLOTS * 64, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    void *space = mmap(nullptr, (size_t)REGIONS * STRIDE, PROT_READ | PROT_WRITE,
                       MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    char *base = static_cast<char *>(space);
    uint64_t *regs = static_cast<uint64_t *>(calloc(REGIONS, 64));
    if (memo == MAP_FAILED || space == MAP_FAILED || !regs) {
        fprintf(stderr, "hit_model: out of memory\n");
        return 1;
    }
    /* One 2 MiB page, as the library's memo (a hint: fine if refused). */
    uintptr_t aligned = ((uintptr_t)memo + MEMO_SLOTS * 64 - 1) & ~((uintptr_t)MEMO_SLOTS * 64 - 1);
    model_memo = reinterpret_cast<struct model_slot *>(aligned);
    madvise(model_memo, MEMO_SLOTS * 64, MADV_HUGEPAGE);
    uint32_t *ix = model_fill(base, regs);
    if (!ix) {
        fprintf(stderr, "hit_model: out of memory\n");
        return 1;
    }
    for (uint32_t i = 0; i < REGIONS; i++) {  /* every region cached, as in the bench */
        struct vmt_reg *r;
        if (vmt_get(dev, base + (size_t)i * STRIDE, REGION_BYTES, VMT_ACCESS_READ, &r)) {
            fprintf(stderr, "hit_model: registering region %u failed\n", i);
            return 1;
        }
        vmt_put(r);
    }
    std::vector<double> lib(ROUNDS), model(ROUNDS), ratio(ROUNDS);
    run_loop(vmt_get, vmt_put, dev, base, ix, hits / 10);  /* warm up both */
    if (run_loop(model_get, model_put, dev, base, ix, hits / 10) < 0) {
        fprintf(stderr, "hit_model: the model missed\n");
        return 1;
    }
    for (int k = 0; k < ROUNDS; k++) {
        model[k] = run_loop(model_get, model_put, dev, base, ix, hits);
        lib[k] = run_loop(vmt_get, vmt_put, dev, base, ix, hits);
        if (model[k] < 0 || lib[k] < 0) {
            fprintf(stderr, "hit_model: a get failed\n");
            return 1;
        }
        ratio[k] = lib[k] / model[k];
    }
    printf("vmt_get+vmt_put %.2f ns, the model %.2f ns, library / model %.2fx "
           "(medians of %d alternated rounds of %zu hits, thread CPU time)\n",
           median(lib), median(model), median(ratio), ROUNDS, hits);
    vmt_device_detach(dev);
    vmt_cache_destroy(cache);
    return 0;
}
