/* libvmtrack-ucx: UCX (1.13 to 1.23) takes its memory events from vmtrack's tracker.
 *
 * Load it before UCX creates its registration caches (LD_PRELOAD=libvmtrack-ucx.so, or link
 * -lvmtrack-ucx before -lucp/-lucs). Its constructor calls vmt_ucx_init(), which
 *   - learns which UCX runs; under a release it does not know it says so and stays off,
 *   - declares UCM_EVENT_VM_UNMAPPED external (ucm_set_external_event), so UCX's ucm patches
 *     nothing more in libc for its caches (it sets ucm's hook mode to none in memory; libc is
 *     left unpatched only where the process started with UCX_MEM_MMAP_HOOK_MODE=none, since
 *     libucs's constructor patches before this one runs),
 *   - subscribes to the process-wide vmtrack cache (vmt_subscribe(vmt_shared(), ...)) and hands
 *     every address-space event to UCX with ucm_vm_munmap(),
 *   - with a tracker that only reports ranges it watches (kmod, uffd): wraps every ucs_rcache
 *     that needs unmap events so that each UCX region is watched from before UCX registers it
 *     until UCX deregisters it, and checks the watch on every hit: in ucs_rcache_get, and from
 *     UCX 1.14 on, whose UCP cache hits are inline code in libucp, in the ucs_pgtable_lookup
 *     each of them calls. Where that lookup cannot be interposed (the module loaded after
 *     libucs) it keeps UCX from caching what needs unmap events instead (see doc/ucx.md).
 * If vmtrack has no tracker that can feed UCX ("pass", "none"), or VMTRACK_UCX=0, the module
 * stays out of the way and UCX keeps its own hooks.
 *
 * Environment: VMTRACK_UCX (1|0, default 1), VMTRACK_UCX_CHECK=0 (UCX 1.14 on with kmod or
 * uffd: refuse UCP's cache instead of checking its hits, for comparison), plus vmtrack's own
 * VMTRACK_* variables. */
#ifndef VMTRACK_UCX_H
#define VMTRACK_UCX_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

enum vmt_ucx_mode {
    VMT_UCX_OFF = 0,     /* not feeding UCX: UCX uses its own hooks (why: vmt_ucx_mode) */
    VMT_UCX_SYNC = 1,    /* tracker reports every unmap before it happens (hooks) */
    VMT_UCX_WATCH = 2,   /* tracker reports watched ranges (kmod, uffd): regions are watched
                          * and checked on every hit */
    VMT_UCX_UNCACHED = 3, /* tracker reports watched ranges, UCX's hits cannot be checked
                           * (UCX 1.14 on, the module's lookup not reached, or
                           * VMTRACK_UCX_CHECK=0): UCX gets no cache that needs unmap events */
};

/* Idempotent; the constructor calls it. 0 when the module feeds UCX, else a negative errno
 * (the module is then off and UCX keeps its own hooks). Must run before UCX creates an rcache
 * (before ucp_init) to take effect for that rcache. */
int vmt_ucx_init(void);

/* The mode in use and, in `why` (may be NULL), one line saying why. */
enum vmt_ucx_mode vmt_ucx_mode(char *why, size_t whylen);

/* The UCX release the module found ("1.18.1"), or "unknown". */
const char *vmt_ucx_release(void);

/* Name of vmtrack's tracker feeding UCX ("hooks", "kmod", "uffd"), or "off". */
const char *vmt_ucx_tracker(void);

struct vmt_ucx_stats {
    size_t   sz;
    uint64_t events;        /* address-space events handed to ucm_vm_munmap */
    uint64_t event_bytes;   /* bytes those events covered */
    uint64_t rcaches;       /* ucs_rcaches wrapped (WATCH mode, and SYNC on 1.13) */
    uint64_t watches;       /* UCX regions watched at registration (WATCH mode) */
    uint64_t stale;         /* hits found stale by the check and re-resolved (WATCH mode) */
    uint64_t native_rcaches;    /* rcaches served by vmt_shared() now (rcache_native.c) */
    uint64_t forwarded_rcaches; /* rcaches created by libucs (GPU, xpmem, unknown UCX) */
    uint64_t refused_rcaches;   /* VMT_UCX_UNCACHED: rcaches needing unmap events, refused */
    uint64_t uct_registrations; /* memory registrations UCT made (uct_md_mem_reg*) */
    uint64_t witness_registrations; /* those covering the range vmt_ucx_witness() named */
    uint64_t stale_lookups; /* of `stale`, those found in ucs_pgtable_lookup (UCP's inline
                             * hits, UCX 1.14 on) */
    uint64_t reported;      /* events vmtrack reported to the module; in WATCH mode they reach
                             * ucm_vm_munmap (`events`) at the next call into a UCX cache */
};
int vmt_ucx_stats_get(struct vmt_ucx_stats *stats);

/* From now on, count UCT's registrations that cover [addr, addr + len) (one range per
 * process; len 0 forgets it): a test's proof that its buffer was registered (zero-copy), not
 * copied through UCX's bounce buffers. 0, or -EINVAL for a range that wraps. */
int vmt_ucx_witness(const void *addr, size_t len);

#ifdef __cplusplus
}
#endif
#endif
