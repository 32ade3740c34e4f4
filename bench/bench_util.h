// What the parts of `vmtrack bench` share: a row of the printed tables, medians, number
// formatting, and the way to the UCX helper process (bench/bench_ucx_main.c).
#ifndef VMTRACK_BENCH_UTIL_H
#define VMTRACK_BENCH_UTIL_H

#include <algorithm>
#include <cstddef>
#include <cstdio>
#include <ctime>
#include <initializer_list>
#include <string>
#include <vector>

#include "null_device.h"

// The UCX the comparison rows name: the one built against (configure).
#ifdef VMT_UCX_VERSION
#define VMT_BENCH_UCX "UCX " VMT_UCX_VERSION
#else
#define VMT_BENCH_UCX "UCX"
#endif

namespace vmt_bench {

struct Row {
    std::string name, value, unit, target, verdict;
};

inline double median(std::vector<double> v)
{
    if (v.empty())
        return -1;
    std::sort(v.begin(), v.end());
    return v[v.size() / 2];
}

inline std::string fmt(double v, int prec = 1)
{
    char buf[64];
    snprintf(buf, sizeof buf, "%.*f", prec, v);
    return buf;
}

inline std::string verdict(bool met) { return met ? "met" : "NOT MET"; }

// The null device: registers nothing, so that what is measured is the cache.
using ::null_dereg;
using ::null_reg;

// CPU time of the calling thread: what it ran, without what the hypervisor took.
inline double thread_cpu_ns()
{
    struct timespec ts;
    clock_gettime(CLOCK_THREAD_CPUTIME_ID, &ts);
    return (double)ts.tv_sec * 1e9 + (double)ts.tv_nsec;
}

// The directory of the running command (under libtool, the build tree's .libs/): 0, or a
// negative errno.
int command_dir(std::string *dir);
// The first of `paths` that access() allows with `mode`, or "".
std::string first_accessible(std::initializer_list<std::string> paths, int mode);

// Runs vmtrack-ucx-bench with these arguments and reads `count` numbers from its output;
// `env` goes before the command in the shell's line (an `env ...` prefix: the UCX module's
// rows preload it). 0, or a negative errno (the helper is missing, failed, or printed
// something else).
int run_ucx_helper(const std::string &args, double *out, int count, const std::string &env = "");

}  // namespace vmt_bench

#endif
