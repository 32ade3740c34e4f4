// The miss side of `vmtrack bench`: fresh regions, a working set larger than the cache, buffers
// used once, pass mode and two threads missing at once, each (with --compare-ucx) against
// UCX's rcache on the same workload (bench/miss_workloads.h).
#ifndef VMTRACK_BENCH_MISS_H
#define VMTRACK_BENCH_MISS_H

#include <string>
#include <vector>

#include "bench_util.h"

namespace vmt_bench {

struct MissBenchOptions {
    bool quick = false;
    bool compare_ucx = false;
    std::string tracker;  // the tracker of these workloads (the table uses hooks)
};

// Appends its rows; *json gets a JSON object of its figures. 0, or a negative errno.
int bench_misses(const MissBenchOptions &opt, std::vector<Row> *rows, std::string *json);

}  // namespace vmt_bench

#endif
