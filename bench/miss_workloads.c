/* The miss-side workloads of `vmtrack bench --compare-ucx` (see miss_workloads.h). */
#define _GNU_SOURCE
#include "miss_workloads.h"

#include <errno.h>
#include <pthread.h>
#include <sched.h>
#include <stdatomic.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#define STRIDE_APART (128u * 1024u)
#define RANDOM_REGIONS 1024u
#define RANDOM_IDX 65536u   /* random region numbers, cycled: the generator is not timed */
#define PAGE 4096u

#define HOT_REGIONS 64u
#define CHURN_REGIONS 4032u

static const char *const workload_names[] = {"fresh-apart", "fresh-adjacent", "random-1024",
                                             "once", "hot-churn", "random-1024-first",
                                             "fresh-settled"};
static const char *const workload_titles[] = {
    "first get+put, fresh 64 KiB regions 128 KiB apart",
    "first get+put, fresh 64 KiB regions back to back",
    "1024 regions at random through 512 entries",
    "buffer used once: mmap,touch,get,put,munmap, +ns",
    "64 hot regions (9 gets in 10) while 4032 churn",
    "  the random 1024, a new cache's first 5000 gets",
    "first get+put, fresh regions apart, after 1024 untimed",
};

const char *miss_workload_name(enum miss_workload w)
{
    return (unsigned)w < sizeof workload_names / sizeof workload_names[0] ? workload_names[w] : "?";
}

const char *miss_workload_title(enum miss_workload w)
{
    return (unsigned)w < sizeof workload_titles / sizeof workload_titles[0] ? workload_titles[w]
                                                                           : "?";
}

int miss_workload_parse(const char *name)
{
    for (unsigned i = 0; i < sizeof workload_names / sizeof workload_names[0]; i++)
        if (strcmp(name, workload_names[i]) == 0)
            return (int)i;
    return -1;
}

#define NULL_COUNT_SLOTS 64u

struct null_count {
    struct {
        _Alignas(64) atomic_ulong n;
    } slot[NULL_COUNT_SLOTS];
};

struct null_count *null_count_new(void)
{
    struct null_count *c = aligned_alloc(64, sizeof *c);
    if (c)
        for (unsigned i = 0; i < NULL_COUNT_SLOTS; i++)
            atomic_init(&c->slot[i].n, 0);
    return c;
}

void null_count_free(struct null_count *c) { free(c); }

void null_count_add(struct null_count *c)
{
    static atomic_uint next_slot;
    static __thread unsigned slot = ~0u;
    if (slot == ~0u)
        slot = atomic_fetch_add(&next_slot, 1) % NULL_COUNT_SLOTS;
    /* Threads past the slots share one: still exact, only no longer unshared. */
    atomic_fetch_add_explicit(&c->slot[slot].n, 1, memory_order_relaxed);
}

unsigned long null_count_read(const struct null_count *c)
{
    unsigned long sum = 0;
    for (unsigned i = 0; i < NULL_COUNT_SLOTS; i++)
        sum += atomic_load_explicit(&c->slot[i].n, memory_order_relaxed);
    return sum;
}

static double clock_ns(clockid_t id)
{
    struct timespec ts;
    clock_gettime(id, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

/* The threads' common start. A pthread barrier let the last thread through at once and woke
 * the others by a futex: on a 2-vCPU guest that wake-up took up to milliseconds, while a
 * thread's whole run of 32768 misses takes four, so "two threads together" were often one
 * after the other (measured: 0.9-1.0x the misses of one thread when they started apart,
 * 0.2-0.3x when they did overlap). Here every thread spins until all have arrived. */
struct start_line {
    atomic_uint arrived;
    unsigned threads;
};

static inline void relax(void)
{
#if defined(__x86_64__) || defined(__i386__)
    __builtin_ia32_pause();
#else
    __asm__ __volatile__("" ::: "memory");
#endif
}

static void start_together(struct start_line *l)
{
    atomic_fetch_add(&l->arrived, 1);
    for (unsigned spins = 0; atomic_load(&l->arrived) < l->threads; spins++) {
        if (spins < 100000)
            relax();
        else
            sched_yield();  /* more threads than CPUs, or one not scheduled yet */
    }
}

/* Each thread's on lines of its own: the loops write err at every get, and two threads'
 * structs side by side in one line moved it between their CPUs at every get (two threads
 * missing together, each on a vmtrack cache of its own, did 0.84-1.18x the misses of one). */
struct miss_thread {
    _Alignas(64) pthread_t tid;
    const struct miss_cache *cache;
    enum miss_workload w;
    size_t ops;
    unsigned seed;
    struct start_line *start;
    double t0, t1, cpu;
    double median, median_without;  /* MISS_ONCE: per iteration */
    unsigned long regs;             /* device registrations while timed */
    int err;
};

static int get_put(const struct miss_cache *c, void *addr)
{
    void *h;
    int rc = c->get(c->ctx, addr, MISS_REGION_BYTES, &h);
    if (rc == 0)
        c->put(c->ctx, h);
    return rc;
}

static unsigned long registrations(const struct miss_cache *c)
{
    return c->registrations(c->ctx);
}

static char *map_span(size_t bytes)
{
    void *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE,
                   MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    return p == MAP_FAILED ? NULL : (char *)p;
}

/* Every region once, in address order: each get is the first of its region. The first
 * `settle` of them before the start line, untimed. */
static int run_fresh(struct miss_thread *t, size_t stride, size_t settle,
                     struct start_line *start)
{
    size_t span = (settle + t->ops) * stride;
    char *base = map_span(span);
    if (!base)
        t->err = -errno;
    for (size_t i = 0; i < settle && !t->err; i++)
        t->err = get_put(t->cache, base + i * stride);
    if (base)
        base += settle * stride;
    start_together(start);
    if (t->err)
        return t->err;
    t->regs = registrations(t->cache);
    t->cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    t->t0 = clock_ns(CLOCK_MONOTONIC);
    for (size_t i = 0; i < t->ops && !t->err; i++)
        t->err = get_put(t->cache, base + i * stride);
    t->t1 = clock_ns(CLOCK_MONOTONIC);
    t->cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID) - t->cpu;
    t->regs = registrations(t->cache) - t->regs;
    if (base)
        munmap(base - settle * stride, span);
    return t->err;
}

/* Region numbers for the random workloads: any of 1024, or the hot-and-churn mix. */
static uint32_t *random_regions(struct miss_thread *t, int hot)
{
    uint32_t *idx = malloc(RANDOM_IDX * sizeof *idx);
    for (size_t i = 0; idx && i < RANDOM_IDX; i++) {
        unsigned r = (unsigned)rand_r(&t->seed);
        if (!hot)
            idx[i] = r % RANDOM_REGIONS;
        else if (r % 10)
            idx[i] = (r / 10) % HOT_REGIONS;
        else
            idx[i] = HOT_REGIONS + (r / 10) % CHURN_REGIONS;
    }
    return idx;
}

/* Random gets before the timed ones (settle), after the in-order pass that fills the cache:
 * the timed gets then see the workload's steady state. A new vmtrack cache's first random
 * gets cost more (its memo fills, and its lines come into the CPU's caches, as ranges come
 * back: 130-135 ns a get in the first 5000 here, 115-118 from then on, timed in chunks of
 * 2500); UCX's has no such phase. MISS_RANDOM_FIRST times those first gets. */
#define RANDOM_SETTLE_GETS (8u * RANDOM_REGIONS)

/* Gets at the regions idx names, cycled; the cache is warmed with a pass over the first of
 * them, untimed, and where `settle`, with RANDOM_SETTLE_GETS more from the end of idx. */
static int run_random(struct miss_thread *t, int hot, int settle, struct start_line *start)
{
    size_t regions = hot ? HOT_REGIONS + CHURN_REGIONS : RANDOM_REGIONS;
    size_t span = regions * STRIDE_APART;
    uint32_t *idx = random_regions(t, hot);
    char *base = map_span(span);
    if (!idx || !base)
        t->err = -ENOMEM;
    for (size_t i = 0; !t->err && i < RANDOM_REGIONS; i++)  /* warm: the cache is full */
        t->err = get_put(t->cache, base + (size_t)(hot ? idx[i] : i) * STRIDE_APART);
    for (size_t i = RANDOM_IDX - RANDOM_SETTLE_GETS; settle && !t->err && i < RANDOM_IDX; i++)
        t->err = get_put(t->cache, base + (size_t)idx[i] * STRIDE_APART);
    start_together(start);
    if (!t->err) {
        t->regs = registrations(t->cache);
        t->cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
        t->t0 = clock_ns(CLOCK_MONOTONIC);
        for (size_t i = 0; i < t->ops && !t->err; i++)
            t->err = get_put(t->cache, base + (size_t)idx[i % RANDOM_IDX] * STRIDE_APART);
        t->t1 = clock_ns(CLOCK_MONOTONIC);
        t->cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID) - t->cpu;
        t->regs = registrations(t->cache) - t->regs;
    }
    if (base)
        munmap(base, span);
    free(idx);
    return t->err;
}

static int cmp_double(const void *a, const void *b)
{
    double x = *(const double *)a, y = *(const double *)b;
    return x < y ? -1 : x > y;
}

static double median_of(double *v, size_t n)
{
    qsort(v, n, sizeof *v, cmp_double);
    return v[n / 2];
}

/* One buffer used once: mmap, touch every page, (get, put,) munmap. */
static double once(const struct miss_cache *c, int *err)
{
    double t0 = clock_ns(CLOCK_MONOTONIC);
    char *p = map_span(MISS_REGION_BYTES);
    if (!p) {
        *err = -errno;
        return 0;
    }
    for (size_t off = 0; off < MISS_REGION_BYTES; off += PAGE)
        ((volatile char *)p)[off] = 1;
    if (c)
        *err = get_put(c, p);
    munmap(p, MISS_REGION_BYTES);
    return clock_ns(CLOCK_MONOTONIC) - t0;
}

/* A buffer used once, as a code that allocates per message sees it. Each iteration runs the
 * loop's body with the cache and without it, next to each other, and the figures are the
 * medians of each: the page faults and the hypervisor's preemptions, which cost far more than
 * the cache, then fall out of the difference. */
static int run_once(struct miss_thread *t, struct start_line *start)
{
    double *with = malloc(t->ops * sizeof *with), *without = malloc(t->ops * sizeof *without);
    if (!with || !without)
        t->err = -ENOMEM;
    start_together(start);
    t->regs = registrations(t->cache);
    t->cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID);
    t->t0 = clock_ns(CLOCK_MONOTONIC);
    for (size_t i = 0; i < t->ops && !t->err; i++) {
        without[i] = once(NULL, &t->err);
        with[i] = once(t->cache, &t->err);
    }
    t->t1 = clock_ns(CLOCK_MONOTONIC);
    t->cpu = clock_ns(CLOCK_THREAD_CPUTIME_ID) - t->cpu;
    t->regs = registrations(t->cache) - t->regs;
    if (!t->err) {
        t->median = median_of(with, t->ops);
        t->median_without = median_of(without, t->ops);
    }
    free(with);
    free(without);
    return t->err;
}

static void *miss_thread_main(void *arg)
{
    struct miss_thread *t = arg;
    switch (t->w) {
    case MISS_FRESH_APART:
        run_fresh(t, STRIDE_APART, 0, t->start);
        break;
    case MISS_FRESH_ADJACENT:
        run_fresh(t, MISS_REGION_BYTES, 0, t->start);
        break;
    case MISS_FRESH_SETTLED:
        run_fresh(t, STRIDE_APART, 2 * MISS_CACHE_LIMIT, t->start);
        break;
    case MISS_RANDOM_1024:
        run_random(t, 0, 1, t->start);
        break;
    case MISS_HOT_CHURN:
        run_random(t, 1, 1, t->start);
        break;
    case MISS_RANDOM_FIRST:
        run_random(t, 0, 0, t->start);
        break;
    case MISS_ONCE:
        run_once(t, t->start);
        break;
    }
    return NULL;
}

int miss_run(const struct miss_cache *cache, enum miss_workload w, size_t ops, int threads,
             struct miss_result *out)
{
    if (threads < 1 || threads > 64 || !ops || !cache) {
        fprintf(stderr, "miss_run: bad arguments\n");
        return -EINVAL;
    }
    struct miss_thread th[64];
    struct start_line start;
    atomic_init(&start.arrived, 0);
    start.threads = (unsigned)threads;
    memset(th, 0, sizeof th);
    for (int i = 0; i < threads; i++) {
        th[i].cache = cache;
        th[i].w = w;
        th[i].ops = ops;
        th[i].seed = 12345u + 977u * (unsigned)i;
        th[i].start = &start;
        if (pthread_create(&th[i].tid, NULL, miss_thread_main, &th[i]) != 0) {
            fprintf(stderr, "miss_run: pthread_create failed\n");
            abort();  /* the others would wait for it forever */
        }
    }
    double first = 0, last = 0, cpu = 0, per_cpu = 0;
    int err = 0;
    for (int i = 0; i < threads; i++) {
        pthread_join(th[i].tid, NULL);
        if (th[i].err && !err)
            err = th[i].err;
        cpu += th[i].cpu;
        per_cpu += (double)ops / th[i].cpu * 1e9;
        if (i == 0 || th[i].t0 < first)
            first = th[i].t0;
        if (i == 0 || th[i].t1 > last)
            last = th[i].t1;
    }
    if (err) {
        fprintf(stderr, "miss workload %s: get failed: %s\n", miss_workload_name(w),
                strerror(-err));
        return err;
    }
    /* CPU time, not wall time: this machine is shared, and a thread that waits for a CPU
     * would charge the wait to whichever cache it was running. */
    out->ns_per_op = cpu / threads / (double)ops;
    out->once_without_ns = 0;
    if (w == MISS_ONCE) {  /* the first thread's medians */
        out->ns_per_op = th[0].median;
        out->once_without_ns = th[0].median_without;
    }
    out->ops_per_sec = (double)ops * threads / ((last - first) / 1e9);
    out->ops_per_cpu_sec = per_cpu;
    /* The counter is the device's, shared by the threads: one thread's window says it all. */
    out->regs_per_op = threads == 1 ? (double)th[0].regs / (double)ops : -1;
    return 0;
}
