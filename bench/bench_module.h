// `vmtrack bench --compare-ucx`'s rows for libvmtrack-ucx against stock UCX (bench_module.cc).
#ifndef VMTRACK_BENCH_MODULE_H
#define VMTRACK_BENCH_MODULE_H

#include <string>
#include <vector>

#include "bench_util.h"

namespace vmt_bench {

// Hits (1 and 2 threads) and the miss workloads through UCX's rcache API, the module preloaded
// into the UCX helper against stock UCX, into `rows`; `json` gets an object of the ratios.
// 0 (also when the module is not found: one row says so), or a negative errno.
int bench_ucx_module(bool quick, std::vector<Row> *rows, std::string *json);

}  // namespace vmt_bench

#endif
