/* Micro-benchmark (not a test): what each tracker adds to unmapping. Prints, per tracker
 * available here, the extra cost of mmap+munmap of memory the cache does not hold and the cost
 * of munmap of a range it holds. Run: test/bench_trackers [tracker...] */
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
    printf("%-8s %28s %26s\n", "tracker", "mmap+munmap unheld: +ns", "munmap of held 64K: ns");
    for (int i = 0; i < n; i++) {
        double added, watched;
        int rc = vmt_bench_tracker_unmap(list[i], &added, &watched);
        if (rc)
            printf("%-8s %28s (%s)\n", list[i], "not available", strerror(-rc));
        else
            printf("%-8s %28.0f %26.0f\n", list[i], added, watched);
    }
    return 0;
}
