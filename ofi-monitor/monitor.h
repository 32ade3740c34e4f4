/* vmtrack's memory monitor for libfabric's MR cache (struct fid_mem_monitor, fi_ext.h).
 *
 * One per process in practice (libfabric takes one import), but an object so that the tests
 * can drive the contract with a notify of their own. The callbacks, and what each may do:
 *   start      first MR cache attached: open the watch cache, run the notifier thread
 *   stop       last MR cache detached: no notify after this returns
 *   subscribe  under libfabric's mm_lock, after the provider registered: cache only under a
 *              watch armed before the registration began (arms.h), else arm one and refuse
 *   unsubscribe (libfabric >= 2.1; never in 1.17) one reference less
 *   valid      under mm_lock, on every hit: lock-free, answers from vmtrack's watch
 *   notify     (libfabric's) only from the notifier thread, between start and stop */
#ifndef VMTRACK_OFI_MONITOR_H
#define VMTRACK_OFI_MONITOR_H

#include <pthread.h>
#include <stdatomic.h>
#include <stdbool.h>

#include <rdma/fabric.h>
#include <rdma/fi_ext.h>

#include "arms.h"
#include "queue.h"
#include "ranges.h"
#include "vmtrack_ofi.h"

struct vmt_cache;
struct vmt_device;

struct vmt_ofi_mon {
    struct fid_mem_monitor fid;        /* first: libfabric hands this pointer back */
    struct fi_ops_mem_monitor ops;
    size_t max_ranges;
    const char *tracker_override;      /* tests: a tracker for the watch cache; NULL: shared */

    /* The watch cache: vmtrack's tracker, a device that registers nothing, no merging. */
    pthread_mutex_t open_lock;         /* start/stop/open; never taken inside libfabric locks */
    struct vmt_cache *wcache;
    struct vmt_device *wdev;
    struct vmt_cache *fed_from;        /* tracker "none": the shared cache whose events we take */
    char tracker[16];
    char why[256];                     /* why start failed, for a human */

    struct vmt_ofi_ranges ranges;
    struct vmt_ofi_arms arms;          /* watches known before a registration (arms.h) */
    struct vmt_ofi_queue queue;

    /* The notifier. notify_lock is held around "started? then notify" and by start/stop, so
     * no notify begins after stop returned. It is never taken by anything that may hold
     * mm_lock (hooks, valid, subscribe push to the queue without it). */
    pthread_mutex_t notify_lock;
    bool started;                      /* under notify_lock */
    _Atomic int running;               /* fast check for valid/subscribe/events */
    pthread_t thread;
    _Atomic int thread_up;
    _Atomic int quit;
    uint64_t pass;                     /* notifier only */

    struct vmt_ofi_stats st;           /* counters, atomically added */
    _Atomic uintptr_t witness_lo, witness_hi;   /* vmt_ofi_witness's range; empty: lo == hi */
};

/* Fill in the monitor (fid, ops). max_ranges 0: from VMTRACK_OFI_MAX_RANGES or 4096. */
int  vmt_ofi_mon_init(struct vmt_ofi_mon *m, size_t max_ranges);
/* Stop the thread and release everything (tests; the library never frees its monitor). */
void vmt_ofi_mon_fini(struct vmt_ofi_mon *m);
/* The notifier's thread id (for tests), valid while thread_up. */
bool vmt_ofi_mon_notifier(struct vmt_ofi_mon *m, pthread_t *out);
void vmt_ofi_mon_stats(struct vmt_ofi_mon *m, struct vmt_ofi_stats *out);
void vmt_ofi_mon_witness(struct vmt_ofi_mon *m, uintptr_t addr, size_t len);

#endif
