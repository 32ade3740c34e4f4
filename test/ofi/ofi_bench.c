/* The figures: what a cache hit costs (fi_mr_reg + fi_close of a cached buffer) and what a
 * munmap of a cached range costs, with whichever monitor this process has. The parent turns
 * them into ratios against libfabric's memhooks measured in the same guest run. */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include "ofi_rig.h"
#include "ofi_suite.h"

#define LEN (64u << 10)

static double now_ns(void)
{
    struct timespec t;
    clock_gettime(CLOCK_MONOTONIC, &t);
    return (double)t.tv_sec * 1e9 + (double)t.tv_nsec;
}

static void *fresh(void)
{
    void *p = mmap(NULL, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    memset(p, 1, LEN);
    return p;
}

int ofi_bench_run(struct ofi_rig *r, unsigned iters)
{
    void *buf = fresh();
    int ret = rig_reg(r, buf, LEN);   /* two misses with vmtrack's monitor (arms.h) */
    if (!ret)
        ret = rig_reg(r, buf, LEN);
    if (ret) {
        printf("RESULT bench error fi_mr_reg: %d\n", ret);
        return 1;
    }
    double t0 = now_ns();
    for (unsigned i = 0; i < iters; i++)
        rig_reg(r, buf, LEN);
    double hit = (now_ns() - t0) / iters;

    unsigned n = iters / 10 ? iters / 10 : 1;
    double cached = 0, plain = 0;
    for (unsigned i = 0; i < n; i++) {
        void *p = fresh();
        rig_reg(r, p, LEN);   /* a miss; vmtrack's monitor arms the range, caches at the next */
        rig_reg(r, p, LEN);   /* cached now, whichever the monitor */
        t0 = now_ns();
        munmap(p, LEN);
        cached += now_ns() - t0;
        p = fresh();           /* never registered */
        t0 = now_ns();
        munmap(p, LEN);
        plain += now_ns() - t0;
    }
    printf("RESULT bench hit_ns %.0f munmap_cached_ns %.0f munmap_plain_ns %.0f\n", hit,
           cached / n, plain / n);
    fflush(stdout);
    munmap(buf, LEN);
    return 0;
}
