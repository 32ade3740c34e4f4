// The CPU a bench ran on, as its report names it: the targets are met on one CPU and not on
// another (doc/bench.md keeps the latest figures per CPU model).
#ifndef VMTRACK_BENCH_CPU_MODEL_H
#define VMTRACK_BENCH_CPU_MODEL_H

#include <string>

namespace vmt_bench {

// "AMD EPYC (family 26, model 2), L1d 48 KiB, 2 CPUs": /proc/cpuinfo's model name, family
// and model (a hypervisor may hide the generation in the name), the first CPU's L1 data
// cache from sysfs, the CPUs online. Parts it cannot read are left out.
std::string cpu_model();

}  // namespace vmt_bench

#endif
