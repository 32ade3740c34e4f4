/* The parts of test_ofi_rdma that run in a child process, one monitor each (the monitor is
 * chosen per process: FI_MR_CACHE_MONITOR, or libvmtrack-ofi loaded before libfabric). Each
 * prints "RESULT ..." lines on stdout for the parent; libfabric's own log goes to stderr. */
#ifndef VMTRACK_TEST_OFI_SUITE_H
#define VMTRACK_TEST_OFI_SUITE_H

struct ofi_scn {
    const char *name;      /* the scenario suite's names (tools/scenarios) where they match */
    const char *what;
};
extern const struct ofi_scn ofi_scns[];
extern const unsigned ofi_scn_count;

struct ofi_rig;
#define OFI_SCN_LEN (256u << 10)   /* the scenarios' buffer; the rig's target must hold it */

/* Each runs on an open rig (target of at least OFI_SCN_LEN bytes) and prints its RESULT
 * line(s); 0, or 1 when something failed that is not what is being measured. */
int ofi_scenario_run(struct ofi_rig *r, const char *scenario);
int ofi_stress_run(struct ofi_rig *r, unsigned rounds, int raw, int fenced);
int ofi_bench_run(struct ofi_rig *r, unsigned iters);
/* Opens a rig (a domain) of its own: prints "RESULT reuse-begin", then, after the domain's
 * close, "RESULT reuse buffers N puts P". */
int ofi_reuse_run(unsigned n);

/* Prints "RESULT monitor <subscribes> <valids> <valids_false> <notifies>" if libvmtrack-ofi
 * is loaded and imported. */
void ofi_print_monitor_stats(void);

#endif
