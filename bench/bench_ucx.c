/* `vmtrack bench --compare-ucx`: the hit workload of `vmtrack bench` run on UCX's own
 * registration cache (ucs_rcache), in the same process and the same run.
 *
 * The rcache gets mem_reg/mem_dereg callbacks that do nothing (like vmtrack's null device), so
 * what is measured is UCX's lookup: ucs_rcache_get + ucs_rcache_region_put on regions that are
 * already cached. UCM_EVENT_VM_UNMAPPED is declared external before the rcache subscribes to
 * it, so UCX installs no libc hooks here: they would not change the hit path (a hit only
 * checks that the invalidation queue is empty) and would be a second patcher next to
 * vmtrack's own hooks tracker. */
#include "config.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "commands.h"

#ifndef HAVE_UCX
int vmtrack_bench_ucx(struct vmtrack_ucx_bench *b)
{
    (void)b;
    fprintf(stderr, "vmtrack bench: built without UCX (libucx-dev), no --compare-ucx\n");
    return -ENOSYS;
}
#else

#include <limits.h>
#include <pthread.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/mman.h>
#include <time.h>
#include <unistd.h>
#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>
#include "bench_ucx_rcache.h"

/* Indices are drawn from a per-thread table of random region numbers, cycled, so that the
 * random-number generator is not part of what is timed. */
#define BENCH_UCX_IDX 65536u

struct bench_ucx_thread {
    pthread_t tid;
    struct bench_ucx_run *run;
    unsigned seed;
    uint32_t *idx;
    double ns;          /* elapsed for this thread's hits */
    double t_start, t_end;
    double cpu_ns;      /* this thread's CPU time for its hits: the hypervisor's steal excluded */
    int err;
};

struct bench_ucx_run {
    ucs_rcache_t *rcache;
    char *base;
    size_t stride;
    size_t region_bytes;
    size_t regions;
    size_t hits;
    pthread_barrier_t barrier;
};

static ucs_status_t bench_ucx_mem_reg(void *context, ucs_rcache_t *rcache, void *arg,
                                      ucs_rcache_region_t *region, uint16_t flags)
{
    (void)context; (void)rcache; (void)arg; (void)region; (void)flags;
    return UCS_OK;
}

static void bench_ucx_mem_dereg(void *context, ucs_rcache_t *rcache,
                                ucs_rcache_region_t *region)
{
    (void)context; (void)rcache; (void)region;
}

static const ucs_rcache_ops_t bench_ucx_ops =
    BENCH_UCX_RCACHE_OPS(bench_ucx_mem_reg, bench_ucx_mem_dereg);

static double bench_ucx_now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static double bench_ucx_thread_cpu_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

static void *bench_ucx_thread_main(void *arg)
{
    struct bench_ucx_thread *t = arg;
    struct bench_ucx_run *run = t->run;
    ucs_rcache_region_t *region;
    size_t i;

    /* warm up: every region once from this thread */
    for (i = 0; i < run->regions; i++) {
        if (bench_ucx_rcache_get(run->rcache, run->base + i * run->stride, run->region_bytes,
                                 &region) != UCS_OK) {
            t->err = -EIO;
            break;
        }
        ucs_rcache_region_put(run->rcache, region);
    }
    pthread_barrier_wait(&run->barrier);
    if (t->err)
        return NULL;

    t->cpu_ns = bench_ucx_thread_cpu_ns();
    t->t_start = bench_ucx_now_ns();
    for (i = 0; i < run->hits; i++) {
        char *addr = run->base + (size_t)t->idx[i & (BENCH_UCX_IDX - 1)] * run->stride;
        if (bench_ucx_rcache_get(run->rcache, addr, run->region_bytes, &region) != UCS_OK) {
            t->err = -EIO;
            break;
        }
        ucs_rcache_region_put(run->rcache, region);
    }
    t->t_end = bench_ucx_now_ns();
    t->cpu_ns = bench_ucx_thread_cpu_ns() - t->cpu_ns;
    t->ns = t->t_end - t->t_start;
    return NULL;
}

/* Each thread's random indices, the threads run together (a barrier), and the figures into
 * b. 0 or a negative errno; th[i].idx stay for the caller to free. */
static int bench_ucx_threads(struct vmtrack_ucx_bench *b, struct bench_ucx_run *run,
                             struct bench_ucx_thread *th)
{
    double first = 0, last = 0, sum_ns = 0, per_cpu_sec = 0;
    int started = 0;
    size_t i, j;

    for (i = 0; i < (size_t)b->threads; i++) {
        th[i].run = run;
        th[i].seed = 0x9e3779b9u * (unsigned)(i + 1);
        th[i].idx = malloc(BENCH_UCX_IDX * sizeof(uint32_t));
        if (th[i].idx == NULL)
            return -ENOMEM;
        for (j = 0; j < BENCH_UCX_IDX; j++)
            th[i].idx[j] = (uint32_t)(rand_r(&th[i].seed) % b->regions);
    }
    if (pthread_barrier_init(&run->barrier, NULL, (unsigned)b->threads) != 0)
        return -ENOMEM;
    for (i = 0; i < (size_t)b->threads; i++) {
        int err = pthread_create(&th[i].tid, NULL, bench_ucx_thread_main, &th[i]);
        if (err != 0) {
            /* the barrier would never open: this is fatal for the run */
            fprintf(stderr, "vmtrack bench --compare-ucx: pthread_create: %s\n",
                    strerror(err));
            abort();
        }
        started++;
    }
    for (i = 0; i < (size_t)started; i++)
        pthread_join(th[i].tid, NULL);
    pthread_barrier_destroy(&run->barrier);

    for (i = 0; i < (size_t)b->threads; i++) {
        if (th[i].err) {
            fprintf(stderr, "vmtrack bench --compare-ucx: ucs_rcache_get failed\n");
            return th[i].err;
        }
        sum_ns += th[i].ns;
        per_cpu_sec += (double)b->hits / (th[i].cpu_ns / 1e9);
        if (i == 0 || th[i].t_start < first)
            first = th[i].t_start;
        if (i == 0 || th[i].t_end > last)
            last = th[i].t_end;
    }
    b->ns_per_hit = sum_ns / (double)b->threads / (double)b->hits;
    b->hits_per_sec = (double)b->hits * (double)b->threads / ((last - first) / 1e9);
    b->hits_per_cpu_sec = per_cpu_sec;
    return 0;
}

int vmtrack_bench_ucx(struct vmtrack_ucx_bench *b)
{
    struct bench_ucx_thread *th = NULL;
    struct bench_ucx_run run;
    ucs_status_t status;
    size_t page = (size_t)sysconf(_SC_PAGESIZE);
    size_t span, i;
    int ret = 0;

    if (b == NULL || b->regions == 0 || b->region_bytes == 0 || b->hits == 0 ||
        b->threads < 1 || b->regions > UINT32_MAX) {
        fprintf(stderr, "vmtrack bench --compare-ucx: regions, region_bytes, hits and "
                        "threads must be positive\n");
        return -EINVAL;
    }

    memset(&run, 0, sizeof(run));
    run.region_bytes = b->region_bytes;
    run.regions = b->regions;
    run.hits = b->hits;
    /* a gap of one page after each (page-rounded) region, so UCX never merges two */
    run.stride = (b->region_bytes + page - 1) / page * page + page;
    if (run.stride > SIZE_MAX / b->regions) {
        fprintf(stderr, "vmtrack bench --compare-ucx: %zu regions of %zu bytes do not fit\n",
                b->regions, b->region_bytes);
        return -EINVAL;
    }
    span = run.stride * b->regions;
    run.base = mmap(NULL, span, PROT_READ | PROT_WRITE,
                    MAP_PRIVATE | MAP_ANONYMOUS | MAP_NORESERVE, -1, 0);
    if (run.base == MAP_FAILED) {
        ret = -errno;
        fprintf(stderr, "vmtrack bench --compare-ucx: mmap of %zu bytes: %s\n", span,
                strerror(errno));
        return ret;
    }

    /* No UCX libc hooks (see the top of this file); the rcache still subscribes. */
    ucm_set_external_event(UCM_EVENT_VM_UNMAPPED);

    status = bench_ucx_rcache_create(&bench_ucx_ops, ULONG_MAX, "vmtrack-bench", &run.rcache);
    if (status != UCS_OK) {
        fprintf(stderr, "vmtrack bench --compare-ucx: ucs_rcache_create: %s\n",
                ucs_status_string(status));
        ret = -EIO;
        goto out_unmap;
    }

    th = calloc((size_t)b->threads, sizeof(*th));
    if (th == NULL) {
        ret = -ENOMEM;
        goto out_rcache;
    }
    ret = bench_ucx_threads(b, &run, th);
    for (i = 0; i < (size_t)b->threads; i++)
        free(th[i].idx);
    free(th);
out_rcache:
    ucs_rcache_destroy(run.rcache);
    ucm_unset_external_event(UCM_EVENT_VM_UNMAPPED);
out_unmap:
    munmap(run.base, span);
    return ret;
}
#endif
