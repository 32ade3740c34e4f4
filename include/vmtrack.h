/* vmtrack: one memory-registration cache per process, shared by every library in it.
 *
 * Conventions. Functions return 0 or a negative errno (each function lists its own; see also
 * vmt_strerror), out-parameters come last, and every struct passed in starts with `size_t sz`,
 * set to sizeof by the caller (VMT_OPTS does it): a program built against an older vmtrack.h
 * passes a smaller struct and gets the defaults for the fields it does not know; a program built
 * against a newer one may pass a larger struct whose unknown tail is zero (else -E2BIG).
 * Everything public is named vmt_ / VMT_. Nothing here is renamed or changes meaning from one
 * release to the next; additions say which release brought them ("since 0.1").
 *
 * Threads. Every function may be called from any thread at the same time, on the same cache or
 * device, with these exceptions: vmt_cache_destroy and vmt_device_detach must not race with
 * other calls on the cache or device they end. A registration may be released (vmt_put) by
 * another thread than the one that got it.
 *
 * Callbacks (device ops, vmt_event_fn, vmt_log_fn) run in whatever thread vmtrack is in when it
 * needs them; what each may do is said where it is declared. */
#ifndef VMTRACK_H
#define VMTRACK_H

#include <stddef.h>
#include <stdint.h>

#include <vmtrack/version.h>

#ifdef __cplusplus
extern "C" {
#endif

struct vmt_cache;   /* a registration cache: one index of address ranges, many devices */
struct vmt_device;  /* something that must register memory before DMA (a PD, a ring, ...) */
struct vmt_reg;     /* one cached registration, held between vmt_get and vmt_put */

/* Declares `struct type name` with .sz set, the given fields, and every other field zero:
 *     VMT_OPTS(vmt_cache_opts, opts, .tracker = "hooks");
 *     VMT_OPTS(vmt_stats, st);
 * GCC and Clang, C and C++ (in C++, name the fields in declaration order). Since 0.1. */
#ifdef __cplusplus
#define VMT_OPTS(type, name, ...)                                                              \
    struct type name = ({                                                                      \
        _Pragma("GCC diagnostic push")                                                         \
        _Pragma("GCC diagnostic ignored \"-Wmissing-field-initializers\"")                     \
        struct type vmt_opts_ = {.sz = sizeof(struct type), __VA_ARGS__};                      \
        _Pragma("GCC diagnostic pop")                                                          \
        vmt_opts_;                                                                             \
    })
#else
#define VMT_OPTS(type, name, ...) struct type name = {.sz = sizeof(struct type), __VA_ARGS__}
#endif

/* ---- version --------------------------------------------------------------------------- */
/* The library's version, "MAJOR.MINOR.PATCH" (VMT_VERSION is the header's). */
const char *vmt_version(void);

/* 0 if this library serves a program built against vmtrack.h version major.minor: the same
 * major version and at least that minor one. -ENOTSUP otherwise (the library is older, or of
 * another major version). Call it as VMT_CHECK_VERSION() to check the header in use. Since 0.1. */
int vmt_check_version(unsigned major, unsigned minor);
#define VMT_CHECK_VERSION() vmt_check_version(VMT_VERSION_MAJOR, VMT_VERSION_MINOR)

/* ---- caches ---------------------------------------------------------------------------- */
enum {
    /* Do not merge a request with cached ranges it overlaps or touches: register exactly the
     * (page-aligned) request; overlapped entries are dropped from the index instead. */
    VMT_CACHE_NO_MERGE = 1u << 0,
};

struct vmt_cache_opts {
    size_t      sz;
    const char *tracker;      /* "auto" (NULL too), "kmod", "bpf", "hooks", "uffd", "none" (manual) */
    size_t      max_entries;  /* 0: default; ranges cached (up to 64 evicted may wait to go) */
    size_t      max_bytes;    /* 0: default (derived from RLIMIT_MEMLOCK and device limits) */
    unsigned    flags;        /* VMT_CACHE_* */
};

/* A new cache (opts NULL: all defaults). Errors: -EINVAL (out NULL, sz smaller than the
 * original struct, unknown flags, unknown tracker name), -E2BIG (sz larger than this library
 * knows and the extra bytes not zero), -ENOMEM; for a tracker named explicitly, why it cannot
 * be used here, e.g. -ENODEV (no /dev/vmtrack), -EACCES or -EPERM (not permitted), -EPROTO (a
 * module of another ABI), -EBUSY (libc already patched by someone else), -ENOTSUP or -ENOSYS
 * (not in this kernel or on this CPU), -ENOSPC (too many caches use the hooks tracker). "auto"
 * never fails for want of a tracker: it falls back to "pass". */
int  vmt_cache_create(const struct vmt_cache_opts *opts, struct vmt_cache **out);
/* Deregisters everything the cache holds and frees it. NULL and the shared cache are ignored. */
void vmt_cache_destroy(struct vmt_cache *cache);

/* The process-wide cache that every library in the process shares. Created on first call with
 * options from the environment (VMTRACK_TRACKER, VMTRACK_MAX_ENTRIES, VMTRACK_MAX_BYTES, ...).
 * Returns NULL and sets errno if it cannot be created (EINVAL: a VMTRACK_* value vmtrack does not
 * understand; else as vmt_cache_create). Never destroyed by callers. */
struct vmt_cache *vmt_shared(void);

/* Name of the tracker actually in use: "kmod", "bpf", "hooks", "uffd" or "none"; since 0.1
 * also "pass" when "auto" found no tracker: every vmt_get registers and every last vmt_put deregisters,
 * nothing is cached, so nothing can be stale. NULL if cache is NULL. */
const char *vmt_cache_tracker(const struct vmt_cache *cache);

/* Why the tracker in use was chosen, and why each other one was not (one line per tracker,
 * "name: reason"), then facts about the tracker in use (mode, limits, counters). Cheap: it
 * measures nothing (`vmtrack info --measure` does). Returns the length it wanted, like snprintf,
 * or -EINVAL if cache is NULL. Since 0.1. */
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

/* reg runs in the thread calling vmt_get. dereg runs in a thread calling vmt_get, vmt_put,
 * vmt_flush, vmt_device_detach or vmt_cache_destroy, or right after a munmap() & co. that the
 * main program itself called (never inside libc's or another library's own call, never on a
 * tracker's monitor thread). Neither runs with a vmtrack lock held; neither may call vmtrack for
 * the same cache. */
struct vmt_device_ops {
    size_t      sz;
    const char *name;
    /* Register [addr, addr+len) with the given VMT_ACCESS_* rights; store the device's handle.
     * Return 0 or a negative errno (-ENOMEM/-ENOSPC make the cache evict and retry once).
     * (Extension, a guarantee) reg runs only inside a vmt_get on this device, in the thread
     * that called it, with no lock of the cache held: a device may pass per-call context to
     * its reg in a thread-local, and reg may itself call vmt_get/vmt_put (stacked caches).
     * Two threads' vmt_gets may call reg at the same time, for the same range too. reg may
     * hold a lock that its dereg also takes: while a reg runs, the vmt_get and vmt_put it
     * makes deregister nothing and wait for no deregistration elsewhere (what they would
     * deregister goes when the outermost reg returns), so an inner device at its max_regions
     * may hold one registration more for that long. */
    int  (*reg)(void *ctx, void *addr, size_t len, unsigned access, void **handle);
    void (*dereg)(void *ctx, void *handle);
    size_t max_regions;       /* 0: no limit of the device's own */
    size_t max_region_bytes;  /* 0: no limit */
    /* (Extension) VMT_DEVICE_* flags; a caller whose sz ends before this field has none.
     * Zero the whole struct before filling it in: fields added later must read as 0. */
    unsigned flags;
    /* (Extension) The bytes of this device's registrations the cache keeps, as max_regions
     * counts them (retired ones still count until deregistered); 0: no limit of the device's
     * own. A miss that would go past it first evicts this device's least recently used
     * registrations that nobody holds; held ones stay, so a device whose registrations are all
     * held goes past it rather than fail (UCX's max_size does the same). Since 0.1. */
    size_t max_bytes;
};
/* The device's reg fails with -EFAULT when any page of the range is not mapped (io_uring fixed
 * buffers and verbs memory regions pin the pages, and pinning finds the hole). The cache then
 * lets that failure be its check that memory is mapped, and makes no system call of its own
 * for it on a miss. A device that may succeed on unmapped memory must not set it. */
#define VMT_DEVICE_CHECKS_MAPPED 0x1u
/* The device's max_regions and max_bytes bound what the cache keeps of it, not what it can
 * hold: a miss registers first and then evicts the device's least recently used registrations
 * down to them, as UCX's rcache does with its max_regions, rather than evict before it
 * registers. The device then holds one registration more than its limit for the length of
 * each miss in progress; in exchange a miss with nothing cached near it needs the cache's lock
 * once instead of twice. What is evicted waits until a batch of the device's evictions is
 * there (a 32nd of max_regions, at most 16; one for a device with max_bytes), then goes
 * before vmt_get returns where no other thread uses a vmtrack cache; in a threaded process it
 * waits for a grace period (a later pass, once the other threads have called into vmtrack) or,
 * when two such batches wait, for a barrier. The device may hold that many registrations more
 * than its limits that long (they count as gone). A device that refuses past a hard limit must
 * not set it. Since 0.1. */
#define VMT_DEVICE_SOFT_LIMITS 0x2u
/* A miss of this device merges with cached ranges it overlaps, not with those it only touches
 * (UCX's rcache merges so). Without it a range that ends where the request starts (or starts
 * where it ends) joins the registration while it is no larger than the request, so that
 * buffers handed out back to back end up in few entries, at the price of registering up to
 * three times the request on such a miss. Since 0.1. */
#define VMT_DEVICE_MERGE_OVERLAPS_ONLY 0x4u

/* Attach a device to a cache. Attaching the same (ops->reg, ctx) pair again returns the same
 * device with its reference count raised, so two libraries that share a PD share registrations.
 * Errors: -EINVAL (NULL cache, ops or out, sz smaller than up to dereg, reg or dereg NULL),
 * -E2BIG (sz larger than known and the extra bytes not zero), -ENOMEM. */
int  vmt_device_attach(struct vmt_cache *cache, const struct vmt_device_ops *ops, void *ctx,
                       struct vmt_device **out);
/* Drops one reference; the last deregisters what only this device holds. NULL is ignored. */
void vmt_device_detach(struct vmt_device *dev);

/* The context the device was attached with (what ops->reg receives); NULL if dev is NULL.
 * Since 0.1. */
void *vmt_device_ctx(const struct vmt_device *dev);

/* ---- registrations --------------------------------------------------------------------- */
/* A registration valid *now* for at least [addr, addr+len) with at least `access`. It may be
 * larger (page-aligned, merged). Held until vmt_put; while held it is not deregistered, even if
 * the memory is unmapped (then it is dropped from the cache and deregistered at the last put).
 * Errors: -EINVAL (NULL, len 0, unknown access bits, a range that wraps), -EFAULT (memory not
 * mapped), -ENOSPC (over the cache's or the device's limits even after eviction), -ENODEV (the
 * device is detached, or was attached in the parent before fork()), -ENOMEM, -EIO (ops->reg
 * returned a positive value), or the device's own error from ops->reg. */
int    vmt_get(struct vmt_device *dev, const void *addr, size_t len, unsigned access,
               struct vmt_reg **out);
/* (Extension) vmt_get that also gives the registration's handle (vmt_reg_handle of *out; NULL
 * on error), for adapters that map a registration to an object of their own on every hit: a
 * hit then reads it with the rest of the lookup instead of loading the registration. Errors
 * as vmt_get's, and -EINVAL if handle is NULL. Since 0.1. */
int    vmt_get_handle(struct vmt_device *dev, const void *addr, size_t len, unsigned access,
                      struct vmt_reg **out, void **handle);
/* (Extension) vmt_get_handle answered from the memo alone (the per-page lookup a steady hit
 * makes first, see vmt_stats.memo_hits): 0 with the registration held, as vmt_get_handle
 * gives it (handle may be NULL), or -EAGAIN with nothing held and *out and *handle untouched
 * where vmt_get_handle would look further (the index, a registration, the device's reg).
 * It never registers or evicts (like vmt_put, it may deregister a registration that was
 * retired while this call took its hold and let it go again). For adapters that must set up per-call context for
 * their device's reg (UCX's `arg`): they try this first and set it up only when it says
 * -EAGAIN, then call vmt_get_handle. Errors: -EINVAL (NULL dev, addr or out, len 0, unknown
 * access bits, a range that wraps), -EAGAIN. Since 0.1. */
int    vmt_get_memo(struct vmt_device *dev, const void *addr, size_t len, unsigned access,
                    struct vmt_reg **out, void **handle);
/* (Extension) vmt_get_handle without its first look, the memo's: the index, then a
 * registration if the range is not cached. The same answers and errors as vmt_get_handle (the
 * memo only caches what the index holds); for the caller whose vmt_get_memo has just said
 * -EAGAIN, which would otherwise pay for the memo's lookup twice on every miss. Since 0.1. */
int    vmt_get_handle_walk(struct vmt_device *dev, const void *addr, size_t len,
                           unsigned access, struct vmt_reg **out, void **handle);
/* Releases a registration from vmt_get, from any thread. NULL is ignored; a second put of the
 * same hold is misuse (logged; aborts in --enable-debug builds). */
void   vmt_put(struct vmt_reg *reg);
void  *vmt_reg_handle(const struct vmt_reg *reg);   /* what ops->reg stored; NULL if reg is */
void  *vmt_reg_addr(const struct vmt_reg *reg);     /* start of the registered range */
size_t vmt_reg_len(const struct vmt_reg *reg);      /* its length; 0 if reg is NULL */
/* The rights the registration was made with (a superset of what was asked). Since 0.1. */
unsigned vmt_reg_access(const struct vmt_reg *reg);

/* ---- maintenance ----------------------------------------------------------------------- */
/* A manual event: the pages of [addr, addr+len) changed. Errors: -EINVAL (NULL cache, len 0). */
int vmt_invalidate(struct vmt_cache *cache, const void *addr, size_t len);
/* Deregister every registration not in use. Errors: -EINVAL (NULL cache). */
int vmt_flush(struct vmt_cache *cache);
/* (Extension) Take this one registration out of the cache: the next vmt_get of its range on
 * its device registers anew, other devices' registrations of the range stay cached. The
 * caller's hold stays valid; the registration is deregistered at its last vmt_put.
 * Errors: -EINVAL (NULL). (UCX's ucs_rcache_region_invalidate.) */
int vmt_reg_invalidate(struct vmt_reg *reg);
/* (Extension) Deregister every registration of this device that is not in use; other devices'
 * stay. Errors: -EINVAL (NULL, detached, or attached in the parent of a fork). */
int vmt_device_flush(struct vmt_device *dev);

struct vmt_stats {
    size_t   sz;
    uint64_t hits, misses, registrations, deregistrations, invalidations, evictions;
    uint64_t entries, bytes_registered;
    /* since 0.1 */
    uint64_t uncached;        /* registrations served without caching (pass mode, unwatchable) */
    uint64_t merges;          /* misses served by registering the union with cached ranges */
    uint64_t upgrades;        /* re-registrations for more access rights */
    uint64_t retries;         /* evict-and-retry after a device said -ENOMEM/-ENOSPC */
    uint64_t deferred;        /* deregistrations deferred to the last vmt_put */
    uint64_t max_entries;     /* the cache's limits in force */
    uint64_t max_bytes;
    uint64_t memo_hits;       /* hits answered from the memo, without walking the index */
    uint64_t memo_wraps;      /* times the memo was cleared because the retire count wrapped */
    /* Retired registrations are deregistered in batches, one reader barrier for each. */
    uint64_t retired_waiting; /* retired, not yet deregistered (held ones included) */
    uint64_t reclaim_passes;  /* batches reclaimed */
    uint64_t reclaim_barriers; /* passes that interrupted the process's other threads
                                  (membarrier); the others waited until those threads had
                                  called vmt_get again, or had none to wait for */
    uint64_t lanes;           /* indexes the cache is made of (VMTRACK_LANES): threads that
                                 miss on memory of different lanes do not wait for each other */
};
/* Fills the first stats->sz bytes (fields this library does not know read 0). Errors: -EINVAL
 * (NULL, sz smaller than the original struct). */
int vmt_stats_get(struct vmt_cache *cache, struct vmt_stats *stats);

/* ---- address-space events for other caches (UCX, libfabric, Open MPI) ------------------ */
/* Called for every range of this process's address space whose pages may have changed, in the
 * thread that caused it where the tracker can, before the change becomes visible.
 * It may run inside munmap(), free() or brk() with libc's locks held (hooks tracker), on a
 * tracker's monitor thread (uffd), or in a thread calling vmt_get or vmt_flush (kmod), possibly
 * with the cache's locks held: it must not allocate memory, call any vmtrack function, or take a
 * lock that its own process may hold while allocating or calling vmtrack. Record the range (or
 * mark what it covers) and act on it later, as UCX's and Open MPI's memory hooks do. */
typedef void (*vmt_event_fn)(void *arg, const void *addr, size_t len);
/* Errors: -EINVAL (NULL cache or fn), -EEXIST (this fn and arg already), -ENOSPC (too many). */
int vmt_subscribe(struct vmt_cache *cache, vmt_event_fn fn, void *arg);
/* Errors: -EINVAL (NULL cache), -ENOENT (not subscribed). */
int vmt_unsubscribe(struct vmt_cache *cache, vmt_event_fn fn, void *arg);

/* Whether pages changed since a moment, for a caller that learns of a range only after
 * something pinned it (libfabric's monitor: the provider registers before subscribe).
 * vmt_changes_mark records the moment: 0 and *mark, or -ENOTSUP where no record of every
 * change of the address space is kept (hooks keeps one in the cache, kmod in the module
 * from the first mark on, with a module that has it; uffd hears of changes after them and
 * watched ranges only: watch first there), -EINVAL, -ENOMEM, or the module's error.
 * vmt_changed_since: 0 if no change overlapping [addr, addr+len) was recorded since the mark
 * (nor is one under way, kmod), 1 if one was or the record no longer reaches back that far
 * (the last 256 changes), -EINVAL (no such mark). Pages pinned after the mark and still unchanged when a
 * vmt_get of the range on this cache has returned are the pages that registration watches. */
int vmt_changes_mark(struct vmt_cache *cache, uint64_t *mark);
int vmt_changed_since(struct vmt_cache *cache, uint64_t mark, const void *addr, size_t len);

/* ---- messages and errors (since 0.1) --------------------------------------------------- */
enum {
    VMT_LOG_LEVEL_ERROR = 0,  /* something is wrong and nobody was told by a return value */
    VMT_LOG_LEVEL_WARN  = 1,  /* works, but not as configured (e.g. caching turned off) */
    VMT_LOG_LEVEL_INFO  = 2,  /* why a call failed, beside the errno it returned */
    VMT_LOG_LEVEL_DEBUG = 3,
};
/* Receives each message the log level lets through (default: warn and error): `line` is one
 * message without a prefix or newline, valid only during the call. It can be called from any
 * thread, rarely from inside munmap() or free() with libc's locks held: it should not allocate
 * or call vmtrack (copy the line into a buffer of its own if it must). */
typedef void (*vmt_log_fn)(void *arg, int level, const char *line);
/* Route vmtrack's messages to fn (NULL: back to stderr, as "vmtrack: ..." lines). Returns 0. */
int vmt_set_log_fn(vmt_log_fn fn, void *arg);
/* The most detailed level that is delivered, to stderr or to the log function. VMTRACK_LOG sets
 * it when the first cache is made; a call here overrides that for the rest of the process.
 * Returns the level before, or -EINVAL for a level that is not VMT_LOG_LEVEL_*. */
int vmt_set_log_level(int level);

/* What a negative errno returned by vmtrack means, in one line (never NULL). */
const char *vmt_strerror(int negative_errno);

#ifdef __cplusplus
}
#endif
#endif
