/* Subcommands of the `vmtrack` command; each lives in its own file. */
#ifndef VMTRACK_TOOLS_COMMANDS_H
#define VMTRACK_TOOLS_COMMANDS_H
#include <stddef.h>
#ifdef __cplusplus
extern "C" {
#endif
int vmtrack_cmd_info(int argc, char **argv);   /* tools/info.cc */
int vmtrack_cmd_bench(int argc, char **argv);  /* bench/bench.cc */
int vmtrack_cmd_check(int argc, char **argv);  /* tools/check.c: the scenario table */

/* The same hit workload run on UCX's ucs_rcache (bench/bench_ucx.c), for --compare-ucx. */
struct vmtrack_ucx_bench {
    size_t regions;        /* distinct regions, each registered once then hit at random */
    size_t region_bytes;   /* size of each region (regions are separated by a gap) */
    size_t hits;           /* hits per thread */
    int threads;           /* 1 or more threads hitting at once */
    double ns_per_hit;     /* out: wall time per get+put pair, per thread */
    double hits_per_sec;   /* out: all threads together */
    double hits_per_cpu_sec; /* out: summed over threads, each by its own CPU time (no steal) */
};
/* 0, or a negative errno with a message on stderr; -ENOSYS when built without UCX. */
int vmtrack_bench_ucx(struct vmtrack_ucx_bench *b);
/* One run of a miss workload of bench/miss_workloads.h ("fresh-apart", ...) on UCX's rcache
 * (bench/bench_ucx_miss.c): out[] = ns per operation, operations per second, per CPU second,
 * for "once" the ns per iteration of the same loop without a cache, and the registrations per
 * operation (one thread; else -1). 0 or a negative errno. */
int vmtrack_bench_ucx_miss(const char *workload, size_t ops, int threads, double out[5]);
#ifdef __cplusplus
}
#endif
#endif
