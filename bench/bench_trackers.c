/* Micro-benchmark (not a test): what each tracker adds to unmapping. Prints, per tracker
 * available here, the extra cost of mmap+munmap of memory the cache does not hold, the tracker's
 * own work per munmap, the cost of munmap of a range it holds and of a miss. Run: bench/bench_trackers [tracker...] */
#include <stdio.h>
#include <string.h>

#include "tracker_bench.h"

int main(int argc, char **argv)
{
    static const char *all[] = {"hooks", "uffd", "kmod", "none"};
    const char **list = all;
    int n = (int)(sizeof all / sizeof all[0]);
    if (argc > 1) {
        list = (const char **)(argv + 1);
        n = argc - 1;
    }
    printf("%-8s %28s %22s %26s %12s\n", "tracker", "mmap+munmap unheld: +ns", "per munmap: +ns",
           "munmap of held 64K: ns", "miss: ns");
    for (int i = 0; i < n; i++) {
        struct vmtrack_tracker_unmap_cost cost;
        int rc = vmtrack_bench_tracker_unmap(list[i], &cost);
        if (rc)
            printf("%-8s %28s (%s)\n", list[i], "not available", strerror(-rc));
        else
            printf("%-8s %28.0f %22.0f %26.0f %12.0f\n", list[i], cost.pair_added_ns,
                   cost.hook_added_ns, cost.watched_ns, cost.miss_ns);
    }
    return 0;
}
