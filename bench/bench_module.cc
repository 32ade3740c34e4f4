// `vmtrack bench --compare-ucx`'s rows for libvmtrack-ucx (issue 14): UCX's own rcache API
// served by vmtrack's shared cache against stock UCX, both in the helper process
// (vmtrack-ucx-bench), the module preloaded into one of them. Hits as the cache's own rows
// measure them (1024 regions of 64 KiB hit at random), misses as the miss rows do, each a
// median of ratios between runs made next to each other.
#include "config.h"
#include "bench_module.h"

#include <unistd.h>

#include <string>
#include <vector>

#include "miss_workloads.h"

namespace vmt_bench {
namespace {

// Where the module is: in the build tree next to the command (under libtool the command runs
// from .libs/ itself), else where it was installed.
std::string find_module()
{
    std::string dir;
    if (command_dir(&dir))
        return "";
    return first_accessible({dir + "/libvmtrack-ucx.so", dir + "/.libs/libvmtrack-ucx.so",
                             std::string(VMT_LIBDIR) + "/libvmtrack-ucx.so"},
                            R_OK);
}

// The helper's environment: stock UCX with its own libc hooks, or the module preloaded with
// the hooks tracker (UCX must not patch libc then).
std::string stock_env() { return "env -u LD_PRELOAD -u UCX_MEM_MMAP_HOOK_MODE "; }
std::string module_env(const std::string &module)
{
    return "env UCX_MEM_MMAP_HOOK_MODE=none VMTRACK_TRACKER=hooks LD_PRELOAD='" + module + "' ";
}

struct HitRun {
    double ns, rate, cpu_rate;
};

int hit_run(const std::string &env, size_t hits, int threads, HitRun *out)
{
    double v[3];
    int rc = run_ucx_helper("1024 65536 " + std::to_string(hits) + " " + std::to_string(threads),
                            v, 3, env);
    *out = HitRun{v[0], v[1], v[2]};
    return rc;
}

// Paired rounds per row, as many as the core's rows: on these VMs one run of the helper moves
// by a third from the next (a miss workload's run lasts a few milliseconds), and the median
// of five pairs flipped verdicts between runs of the same build.
int module_reps(bool quick) { return quick ? 5 : 9; }

// One paired round of a miss workload: stock's and the module's ns per operation (the buffer
// used once: what the cache adds to the loop without it).
int miss_round(const std::string &module, enum miss_workload w, size_t ops, double *stock,
               double *mod)
{
    std::string args = std::string("miss ") + miss_workload_name(w) + " " + std::to_string(ops) +
                       " 1";
    double s[5], m[5];
    int rc = run_ucx_helper(args, s, 5, stock_env());
    if (!rc)
        rc = run_ucx_helper(args, m, 5, module_env(module));
    *stock = w == MISS_ONCE ? s[0] - s[3] : s[0];
    *mod = w == MISS_ONCE ? m[0] - m[3] : m[0];
    return rc;
}

int hit_rows(const std::string &module, bool quick, std::vector<Row> *rows, std::string *json)
{
    const int reps = module_reps(quick);
    const size_t hits = quick ? 500000 : 2000000;
    std::vector<double> mod_ns, stock_ns, ratios, scalings, cpu_scalings, stock_scalings;
    for (int r = 0; r < reps; r++) {
        HitRun s1, m1, m2, s2;
        int rc = hit_run(stock_env(), hits / 4, 1, &s1);
        if (!rc)
            rc = hit_run(module_env(module), hits, 1, &m1);
        if (!rc)
            rc = hit_run(module_env(module), hits, 2, &m2);
        if (!rc)
            rc = hit_run(stock_env(), hits / 4, 2, &s2);
        if (rc)
            return rc;
        stock_ns.push_back(s1.ns);
        mod_ns.push_back(m1.ns);
        ratios.push_back(m1.ns / s1.ns);
        scalings.push_back(m2.rate / m1.rate);
        cpu_scalings.push_back(m2.cpu_rate / m1.cpu_rate);
        stock_scalings.push_back(s2.rate / s1.rate);
    }
    double ratio = median(ratios), scaling = median(scalings);
    rows->push_back({"hit (ucs_rcache_get+region_put), module, 1 thread", fmt(median(mod_ns)),
                     "ns", "<= stock/4 (ratio below)", ""});
    rows->push_back({"  stock " VMT_BENCH_UCX ", same workload", fmt(median(stock_ns)), "ns",
                     "(baseline)", ""});
    rows->push_back({"  module / stock (median of paired runs)", fmt(ratio, 3), "x", "<= 0.25x",
                     verdict(ratio <= 0.25)});
    rows->push_back({"module: 2 threads / 1 thread, hits per second of wall time", fmt(scaling, 2),
                     "x", ">= 1.6x", verdict(scaling >= 1.6)});
    rows->push_back({"  the same, per second of the threads' CPU", fmt(median(cpu_scalings), 2),
                     "x", "(reported)", ""});
    rows->push_back({"  stock UCX: 2 threads / 1 thread, wall", fmt(median(stock_scalings), 2),
                     "x", "(baseline)", ""});
    *json += ",\"hit_ns\":" + fmt(median(mod_ns), 2) + ",\"stock_hit_ns\":" +
             fmt(median(stock_ns), 2) + ",\"hit_vs_stock\":" + fmt(ratio, 3) +
             ",\"scaling_2t\":" + fmt(scaling, 3);
    return 0;
}

int miss_rows(const std::string &module, bool quick, std::vector<Row> *rows, std::string *json)
{
    const int reps = module_reps(quick);
    struct Work {
        enum miss_workload w;
        size_t ops;
        const char *key, *name;  // miss_workload_title's are too long for a ratio's row
    };
    const Work work[] = {
        {MISS_FRESH_APART, MISS_OPS_FRESH, "fresh_apart", "misses, fresh 64 KiB regions apart"},
        {MISS_FRESH_ADJACENT, MISS_OPS_FRESH, "fresh_adjacent", "misses, fresh regions back to back"},
        {MISS_RANDOM_1024, MISS_OPS_RANDOM, "random_1024", "misses, 1024 at random through 512"},
        {MISS_ONCE, MISS_OPS_ONCE, "once", "a buffer used once (what the cache adds)"},
    };
    for (const Work &k : work) {
        std::vector<double> s_ns, m_ns, ratios;
        for (int r = 0; r < reps; r++) {
            double s = 0, m = 0;
            int rc = miss_round(module, k.w, k.ops, &s, &m);
            if (rc)
                return rc;
            s_ns.push_back(s);
            m_ns.push_back(m);
            if (s > 0)
                ratios.push_back(m / s);
        }
        double ratio = median(ratios);  // -1 if no round had a positive stock figure
        rows->push_back({std::string(k.name) + ": module / stock", fmt(ratio, 2), "x",
                         "<= 1.0x", verdict(ratio > 0 && ratio <= 1.0)});
        rows->push_back({"  module, stock " VMT_BENCH_UCX " (ns per op)",
                         fmt(median(m_ns), 0) + " / " + fmt(median(s_ns), 0), "ns",
                         "(reported)", ""});
        *json += std::string(",\"") + k.key + "\":" + fmt(ratio, 3);
    }
    return 0;
}

}  // namespace

// The module serves UCX's rcaches only under UCX 1.13 (ucx-memtype/ucx_release.c): built
// against another UCX there is nothing of it to measure through UCX's rcache API.
#ifdef VMT_UCX_MODULE_SERVES
constexpr bool kModuleBuilt = true;
#else
constexpr bool kModuleBuilt = false;  // configure says why (its summary)
#endif

int bench_ucx_module(bool quick, std::vector<Row> *rows, std::string *json)
{
    *json = "{";
    if (!kModuleBuilt) {
        rows->push_back({"libvmtrack-ucx does not serve UCX's rcaches under " VMT_BENCH_UCX
                         " (only under UCX 1.13), or was left out by configure", "-", "",
                         "(not measured)", ""});
        *json += "\"available\":false}";
        return 0;
    }
    std::string module = find_module();
    if (module.empty()) {
        rows->push_back({"libvmtrack-ucx.so not found next to vmtrack or in " VMT_LIBDIR, "-", "",
                         "(not measured)", ""});
        *json += "\"available\":false}";
        return 0;
    }
    *json += "\"available\":true";
    int rc = hit_rows(module, quick, rows, json);
    if (!rc)
        rc = miss_rows(module, quick, rows, json);
    *json += "}";
    return rc;
}

}  // namespace vmt_bench
