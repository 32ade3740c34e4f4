/* vmtrack-ucx-bench: runs the UCX side of `vmtrack bench --compare-ucx` in its own process,
 * because loading UCX's libucm patches libc's mmap, and vmtrack's hooks tracker then (rightly)
 * refuses to stack on it. Prints "ns_per_hit hits_per_sec hits_per_cpu_sec". */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include "commands.h"

int main(int argc, char **argv)
{
    if (argc != 5) {
        fprintf(stderr, "usage: vmtrack-ucx-bench REGIONS REGION_BYTES HITS THREADS\n");
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
