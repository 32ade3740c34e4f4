/* vmtrack: one memory-registration cache per process, shared by every library in it.
 *
 * The contract is ../shared/API.md of the project: functions return 0 or a negative errno,
 * out-parameters come last, structs passed in start with `size_t sz`. Additions to the contract
 * are marked "extension" below; nothing in the contract is renamed or changed. */
#ifndef VMTRACK_H
#define VMTRACK_H

#include <stddef.h>
#include <stdint.h>

#ifdef __cplusplus
extern "C" {
#endif

#define VMT_VERSION_MAJOR 0
#define VMT_VERSION_MINOR 1
#define VMT_VERSION_PATCH 0

struct vmt_cache;   /* a registration cache: one index of address ranges, many devices */
struct vmt_device;  /* something that must register memory before DMA (a PD, a ring, ...) */
struct vmt_reg;     /* one cached registration, held between vmt_get and vmt_put */

/* ---- caches ---------------------------------------------------------------------------- */
enum {
    /* Do not merge a request with cached ranges it overlaps or touches: register exactly the
     * (page-aligned) request; overlapped entries are dropped from the index instead. */
    VMT_CACHE_NO_MERGE = 1u << 0,
};

struct vmt_cache_opts {
    size_t      sz;
    const char *tracker;      /* "auto" (NULL too), "kmod", "hooks", "uffd", "none" (manual) */
    size_t      max_entries;  /* 0: default */
    size_t      max_bytes;    /* 0: default (derived from RLIMIT_MEMLOCK and device limits) */
    unsigned    flags;        /* VMT_CACHE_* */
};
int  vmt_cache_create(const struct vmt_cache_opts *opts, struct vmt_cache **out);
void vmt_cache_destroy(struct vmt_cache *cache);

/* The process-wide cache that every library in the process shares. Created on first call with
 * options from the environment (VMTRACK_TRACKER, VMTRACK_MAX_ENTRIES, VMTRACK_MAX_BYTES, ...).
 * Returns NULL and sets errno if it cannot be created. Never destroyed by callers. */
struct vmt_cache *vmt_shared(void);

/* Name of the tracker actually in use: "kmod", "hooks", "uffd" or "none".
 * (Extension) "pass" when "auto" found no tracker: every vmt_get registers and every last
 * vmt_put deregisters, nothing is cached, so nothing can be stale. */
const char *vmt_cache_tracker(const struct vmt_cache *cache);

/* (Extension) Why the tracker in use was chosen, and why each other one was not: one line per
 * tracker, "name: reason". Returns the length it wanted (like snprintf). */
int vmt_cache_tracker_report(const struct vmt_cache *cache, char *buf, size_t len);

/* ---- devices --------------------------------------------------------------------------- */
enum {
    VMT_ACCESS_READ          = 1u << 0,  /* the device reads this memory (send, write to file) */
    VMT_ACCESS_WRITE         = 1u << 1,  /* the device writes it (receive, read from file)    */
    VMT_ACCESS_REMOTE_READ   = 1u << 2,
    VMT_ACCESS_REMOTE_WRITE  = 1u << 3,
    VMT_ACCESS_REMOTE_ATOMIC = 1u << 4,
};
#define VMT_ACCESS_ALL 0x1fu

struct vmt_device_ops {
    size_t      sz;
    const char *name;
    /* Register [addr, addr+len) with the given VMT_ACCESS_* rights; store the device's handle.
     * Return 0 or a negative errno (-ENOMEM/-ENOSPC make the cache evict and retry once).
     * (Extension, a guarantee) reg runs only inside a vmt_get on this device, in the thread
     * that called it, with no lock of the cache held: a device may pass per-call context to
     * its reg in a thread-local, and reg may itself call vmt_get/vmt_put (stacked caches).
     * Two threads' vmt_gets may call reg at the same time, for the same range too. */
    int  (*reg)(void *ctx, void *addr, size_t len, unsigned access, void **handle);
    void (*dereg)(void *ctx, void *handle);
    size_t max_regions;       /* 0: no limit of the device's own */
    size_t max_region_bytes;  /* 0: no limit */
};

/* Attach a device to a cache. Attaching the same (ops->reg, ctx) pair again returns the same
 * device with its reference count raised, so two libraries that share a PD share registrations. */
int  vmt_device_attach(struct vmt_cache *cache, const struct vmt_device_ops *ops, void *ctx,
                       struct vmt_device **out);
void vmt_device_detach(struct vmt_device *dev);   /* deregisters what only it holds */

/* (Extension) The context the device was attached with (what ops->reg receives). */
void *vmt_device_ctx(const struct vmt_device *dev);

/* ---- registrations --------------------------------------------------------------------- */
/* A registration valid *now* for at least [addr, addr+len) with at least `access`. It may be
 * larger (page-aligned, merged). Held until vmt_put; while held it is not deregistered, even if
 * the memory is unmapped (then it is dropped from the cache and deregistered at the last put).
 * Errors: -EINVAL (NULL, len 0, unknown access bits), -EFAULT (memory not mapped), -ENOSPC,
 * or the device's own error. */
int    vmt_get(struct vmt_device *dev, const void *addr, size_t len, unsigned access,
               struct vmt_reg **out);
void   vmt_put(struct vmt_reg *reg);
void  *vmt_reg_handle(const struct vmt_reg *reg);   /* what ops->reg stored */
void  *vmt_reg_addr(const struct vmt_reg *reg);     /* start of the registered range */
size_t vmt_reg_len(const struct vmt_reg *reg);
/* (Extension) The rights the registration was made with (a superset of what was asked). */
unsigned vmt_reg_access(const struct vmt_reg *reg);

/* ---- maintenance ----------------------------------------------------------------------- */
int vmt_invalidate(struct vmt_cache *cache, const void *addr, size_t len); /* manual event */
int vmt_flush(struct vmt_cache *cache);    /* deregister every registration not in use */
/* (Extension) Take this one registration out of the cache: the next vmt_get of its range on
 * its device registers anew, other devices' registrations of the range stay cached. The
 * caller's hold stays valid; the registration is deregistered at its last vmt_put. 0, or
 * -EINVAL for NULL. (UCX's ucs_rcache_region_invalidate.) */
int vmt_reg_invalidate(struct vmt_reg *reg);
/* (Extension) Deregister every registration of this device that is not in use; other devices'
 * stay. 0, or -EINVAL (NULL, detached, or attached in the parent of a fork). */
int vmt_device_flush(struct vmt_device *dev);

struct vmt_stats {
    size_t   sz;
    uint64_t hits, misses, registrations, deregistrations, invalidations, evictions;
    uint64_t entries, bytes_registered;
    /* (Extension) */
    uint64_t uncached;        /* registrations served without caching (pass mode, unwatchable) */
    uint64_t merges;          /* misses served by registering the union with cached ranges */
    uint64_t upgrades;        /* re-registrations for more access rights */
    uint64_t retries;         /* evict-and-retry after a device said -ENOMEM/-ENOSPC */
    uint64_t deferred;        /* deregistrations deferred to the last vmt_put */
    uint64_t max_entries;     /* the cache's limits in force */
    uint64_t max_bytes;
    uint64_t memo_hits;       /* hits answered from the memo, without walking the index */
    uint64_t memo_wraps;      /* times the memo was cleared because the retire count wrapped */
};
int vmt_stats_get(struct vmt_cache *cache, struct vmt_stats *stats);

/* ---- address-space events for other caches (UCX, libfabric, Open MPI) ------------------ */
/* Called for every range of this process's address space whose pages may have changed, in the
 * thread that caused it where the tracker can, before the change becomes visible. */
typedef void (*vmt_event_fn)(void *arg, const void *addr, size_t len);
int vmt_subscribe(struct vmt_cache *cache, vmt_event_fn fn, void *arg);
int vmt_unsubscribe(struct vmt_cache *cache, vmt_event_fn fn, void *arg);

/* ---- (extension) diagnostics ----------------------------------------------------------- */
const char *vmt_version(void);           /* "0.1.0" */
const char *vmt_strerror(int negative_errno);

#ifdef __cplusplus
}
#endif
#endif
