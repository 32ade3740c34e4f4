/* vmtrack-ucx-bench: runs the UCX side of `vmtrack bench --compare-ucx` in its own process,
 * because loading UCX's libucm patches libc's mmap, and vmtrack's hooks tracker then (rightly)
 * refuses to stack on it.
 *   vmtrack-ucx-bench REGIONS REGION_BYTES HITS THREADS
 *       the hit workload; prints "ns_per_hit hits_per_sec hits_per_cpu_sec"
 *   vmtrack-ucx-bench miss WORKLOAD OPS THREADS
 *       a miss workload (bench/miss_workloads.h); prints "ns_per_op ops_per_sec
 *       ops_per_cpu_sec ns_per_op_without_cache registrations_per_op" */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "commands.h"

static int run_miss(int argc, char **argv)
{
    size_t ops = argc == 5 ? strtoull(argv[3], NULL, 10) : 0;
    int threads = argc == 5 ? atoi(argv[4]) : 0;
    if (!ops || threads < 1) {
        fprintf(stderr, "usage: vmtrack-ucx-bench miss WORKLOAD OPS THREADS\n");
        return 2;
    }
    double out[5];
    if (vmtrack_bench_ucx_miss(argv[2], ops, threads, out))
        return 1;
    printf("%.3f %.1f %.1f %.3f %.4f\n", out[0], out[1], out[2], out[3], out[4]);
    return 0;
}

int main(int argc, char **argv)
{
    if (argc >= 2 && strcmp(argv[1], "miss") == 0)
        return run_miss(argc, argv);
    if (argc != 5) {
        fprintf(stderr, "usage: vmtrack-ucx-bench REGIONS REGION_BYTES HITS THREADS\n"
                        "       vmtrack-ucx-bench miss WORKLOAD OPS THREADS\n");
        return 2;
    }
    struct vmtrack_ucx_bench b;
    memset(&b, 0, sizeof b);
    b.regions = strtoull(argv[1], NULL, 10);
    b.region_bytes = strtoull(argv[2], NULL, 10);
    b.hits = strtoull(argv[3], NULL, 10);
    b.threads = atoi(argv[4]);
    if (!b.regions || !b.region_bytes || !b.hits || b.threads < 1) {
        fprintf(stderr, "vmtrack-ucx-bench: every argument must be a positive number\n");
        return 2;
    }
    int rc = vmtrack_bench_ucx(&b);
    if (rc)
        return 1;
    printf("%.3f %.1f %.1f\n", b.ns_per_hit, b.hits_per_sec, b.hits_per_cpu_sec);
    return 0;
}
