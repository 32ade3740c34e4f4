/* libvmtrack-ofi: libfabric's MR cache takes its memory events from vmtrack (doc/ofi.md).
 *
 * Loaded by LD_PRELOAD or linked before libfabric, the library imports vmtrack's memory
 * monitor into libfabric from its constructor (unless VMTRACK_OFI=0), before any domain
 * exists. libfabric's MR cache (verbs, verbs;ofi_rxm, efa) then asks vmtrack on every hit
 * whether the range is still what was registered. Functions return 0 or a negative errno. */
#ifndef VMTRACK_OFI_H
#define VMTRACK_OFI_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

/* Import now if the constructor did not (VMTRACK_OFI=0, or a program that wants to choose
 * the moment). 0 once imported; -EBUSY another monitor was imported first or a domain is
 * open; -ECANCELED FI_MR_CACHE_MONITOR is set (libfabric would replace the import);
 * -ENOTSUP libfabric older than 1.14; other errors from fi_open. */
int vmt_ofi_import(void);

/* 1 imported, 0 not imported (why says why), -errno of the failed import. why gets one line. */
int vmt_ofi_state(char *why, size_t len);

/* The tracker libfabric's cache hears through vmtrack ("" before the first domain). */
const char *vmt_ofi_tracker(void);

struct vmt_ofi_stats {
    size_t   sz;
    uint64_t starts, stops;
    uint64_t subscribes, subscribes_refused, unsubscribes;
    uint64_t valids, valids_false;
    uint64_t events, events_dropped;  /* ranges vmtrack reported; of which outside start..stop */
    uint64_t notifies, overflows;     /* notify calls made; queue overflows (full notify) */
    uint64_t ranges, evictions;       /* subscribed ranges now; evicted to stay bounded */
    uint64_t subscribes_unarmed;      /* refused: no watch armed before the registration */
    uint64_t subscribes_logged;       /* cached: the change log shows the range unchanged */
    /* Of subscribes and valids, those overlapping the range named by vmt_ofi_witness: a
     * subscribe follows the provider's registration of it (proof of zero-copy in tests). */
    uint64_t witness_subscribes, witness_valids;
};
int vmt_ofi_stats_get(struct vmt_ofi_stats *st);

/* Count from now on the subscribes and valids overlapping [addr, addr+len) (one range at a
 * time; len 0 stops counting): a program shows that the provider registered its buffer
 * itself. 0, or -ENODEV when the monitor is not imported. */
int vmt_ofi_witness(const void *addr, size_t len);

#ifdef __cplusplus
}
#endif
#endif
