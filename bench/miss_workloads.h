/* The miss-side workloads of `vmtrack bench --compare-ucx`, written once and run on both
 * caches: vmtrack (bench/bench_miss.cc) and UCX's ucs_rcache (bench/bench_ucx_miss.c, in its
 * own process). A cache is reached through two callbacks, so that both run the very same loop
 * over the very same addresses; the indirect call costs both the same few nanoseconds. */
#ifndef VMTRACK_BENCH_MISS_WORKLOADS_H
#define VMTRACK_BENCH_MISS_WORKLOADS_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif

struct miss_cache {
    void *ctx;
    /* 0 or a negative errno; *handle is what put receives */
    int (*get)(void *ctx, void *addr, size_t len, void **handle);
    void (*put)(void *ctx, void *handle);
    /* How many registrations the cache's device made so far: what tells a hit from a miss. */
    unsigned long (*registrations)(void *ctx);
};

enum miss_workload {
    MISS_FRESH_APART,     /* get+put of fresh 64 KiB regions, 128 KiB apart: nothing merges */
    MISS_FRESH_ADJACENT,  /* the same, regions back to back */
    MISS_RANDOM_1024,     /* 1024 regions 128 KiB apart at random (through a 512-entry cache) */
    MISS_ONCE,            /* mmap 64 KiB, touch, get, put, munmap; and the same without get/put */
    MISS_HOT_CHURN,       /* 9 gets in 10 on 64 hot regions, the rest over 4032 others: the hot
                           * ones stay cached while the others evict one another */
    MISS_RANDOM_FIRST,    /* MISS_RANDOM_1024's first gets on a new cache, right after the
                           * in-order pass (the others time a cache that has settled) */
    MISS_FRESH_SETTLED,   /* MISS_FRESH_APART after 1024 misses of each thread's, untimed: a
                           * new cache's one-time costs (its pools growing, its first eviction,
                           * a lane's memo faulted in) are out of the figure */
};

#define MISS_REGION_BYTES (64u * 1024u)
#define MISS_CACHE_LIMIT 512u   /* entries (vmtrack) and max_regions (UCX) for these workloads */
/* Operations per run (`vmtrack bench --misses --quick` halves them), the same for every bench
 * that runs these workloads. */
#define MISS_OPS_FRESH 4096u    /* MISS_FRESH_APART, MISS_FRESH_ADJACENT */
#define MISS_OPS_RANDOM 20000u  /* MISS_RANDOM_1024 */
#define MISS_OPS_ONCE 2000u     /* MISS_ONCE */
#define MISS_OPS_HOT 40000u     /* MISS_HOT_CHURN */
#define MISS_OPS_RANDOM_FIRST 5000u  /* MISS_RANDOM_FIRST */

struct miss_result {
    double ns_per_op;        /* CPU time per get+put, per thread (MISS_ONCE: median iteration) */
    double once_without_ns;  /* MISS_ONCE: the median iteration of the loop without the cache */
    double ops_per_sec;      /* all threads together, by wall time */
    double ops_per_cpu_sec;  /* summed over threads, each by its own CPU time (no steal) */
    double regs_per_op;      /* device registrations per operation while timed (1 thread) */
};

/* The registrations a null device made, counted by both caches' null devices: a cache line
 * per thread, summed when read, so that the device writes nothing two threads share. A
 * shared counter (an atomic add per miss) held two threads missing on two separate vmtrack
 * caches, which share nothing else on a miss, at 1.0-1.2x the misses of one thread per
 * second: the row measured the device's line, not the cache. NULL when out of memory. */
struct null_count;
struct null_count *null_count_new(void);
void null_count_free(struct null_count *c);
void null_count_add(struct null_count *c);
unsigned long null_count_read(const struct null_count *c);

/* The workload's name on the command line of vmtrack-ucx-bench, and back; -1 if unknown. */
const char *miss_workload_name(enum miss_workload w);
/* What the benches print for it. */
const char *miss_workload_title(enum miss_workload w);
int miss_workload_parse(const char *name);

/* Runs `ops` operations of the workload in each of `threads` threads (each on its own memory),
 * on fresh mappings it unmaps afterwards. 0, or a negative errno with a message on stderr. */
int miss_run(const struct miss_cache *cache, enum miss_workload w, size_t ops, int threads,
             struct miss_result *out);

#ifdef __cplusplus
}
#endif
#endif
