/* The test library of libvmtrack's tests (test/lib/vmt_test.c): a device that registers
 * nothing but records every call, a cache with one such device attached (the fixture), the
 * cache's statistics, anonymous mappings, a clock, children run to completion, and whether a
 * tracker is available here. Every helper that checks something checks it with ck_assert, so
 * a failure names the test case it happened in. */
#ifndef VMTRACK_TEST_VMT_TEST_H
#define VMTRACK_TEST_VMT_TEST_H

#include <stdatomic.h>
#include <stddef.h>

#include <vmtrack.h>

#include "check_run.h"

#define MB (1ul << 20)

/* The page size (set before main runs). */
extern size_t page;

/* ---- the fake device ------------------------------------------------------------------- */

/* One registration of the fake device: its handle (vmt_reg_handle). */
struct fake_reg {
    void *addr;
    size_t len;
    unsigned access;
    int live;
};

struct fake_device {
    atomic_long regs, deregs;
    atomic_int fail_next;        /* make the next reg fail with this (negative errno) */
    atomic_int fail_count;       /* ...this many times */
    size_t max_live;             /* refuse with -ENOSPC beyond this many live registrations */
    atomic_int reg_delay_us;     /* a registration takes this long (a real device pins pages) */
    atomic_long live;
    atomic_long live_bytes;      /* of the live registrations */
    _Atomic(void *) watched;     /* a handle whose deregistrations are counted apart... */
    atomic_int watched_deregs;   /* ...here (a handle's memory is freed at its dereg) */
    struct vmt_device_ops ops;
};

/* ops zeroed, then sz, name, reg, dereg and max_regions set: every other field reads as
 * "none", also those added after this test was written. */
void device_ops_init(struct vmt_device_ops *ops, const char *name,
                     int (*reg)(void *, void *, size_t, unsigned, void **),
                     void (*dereg)(void *, void *), size_t max_regions);

/* A fake device that accepts every registration (the device limit is `max_regions`, 0: none);
 * it aborts the program on a second deregistration of one registration. */
void fake_init(struct fake_device *f, size_t max_regions);

/* ---- a cache with a fake device attached ----------------------------------------------- */

struct fixture {
    struct vmt_cache *cache;
    struct fake_device fake;
    struct vmt_device *dev;
};

/* Opens a cache on `tracker` with `flags` and attaches a fresh fake device: 0, or the negative
 * errno of what failed (and nothing is left open). Checks nothing: for a caller that expects a
 * failure, or asks whether the tracker is available. */
int fixture_try_open(struct fixture *fx, const char *tracker, unsigned flags);

/* The same, asserting it worked and that the cache runs on `tracker`. */
void fixture_open(struct fixture *fx, const char *tracker, unsigned flags);

/* The same with limits: the cache's (0: none) and the device's own region limit. */
void fixture_open_limited(struct fixture *fx, const char *tracker, size_t max_entries,
                          size_t max_bytes, unsigned flags, size_t max_regions);

/* Detaches the device and destroys the cache; asserts the device holds no registration. */
void fixture_close(struct fixture *fx);

/* A cache without a device on `tracker`, asserting it was created. */
struct vmt_cache *cache_open(const char *tracker);

/* The cache's statistics, asserting vmt_stats_get worked. */
struct vmt_stats stats_of(struct vmt_cache *c);

/* vmt_get, asserting it worked; returns the registration. */
struct vmt_reg *get_ok(struct vmt_device *dev, const void *addr, size_t len, unsigned access);

/* A read get and its put through the fixture's device, asserting the get worked; returns the
 * registration's handle (the fake's record: equal handles, the same registration). */
void *fixture_get_put(struct fixture *fx, const void *addr, size_t len);

/* ---- memory, time, processes ------------------------------------------------------------- */

/* A private anonymous read-write mapping of `len` bytes, asserting mmap worked; pages not yet
 * present. At `addr` (never replacing a mapping there) unless `addr` is NULL. */
void *map_anon_at(void *addr, size_t len);
void *map_anon(size_t len);
/* ... with every byte set to `byte` (so every page is present). */
void *map_filled(size_t len, int byte);
void *map_filled_at(void *addr, size_t len, int byte);

/* Monotonic wall time, and the CPU time of the calling thread (what a measurement on a shared
 * machine should use), in nanoseconds. */
double now_ns(void);
double thread_cpu_ns(void);

/* Runs `fn` in a child (which exits 0 when `fn` returns) and returns its wait status. */
int run_in_child(void (*fn)(void));

/* Waits for the child `pid` for `seconds` at most, and returns its wait status; one still
 * running then is killed and the test fails, saying it hung while doing `what`. */
int wait_child_within(int pid, int seconds, const char *what);

/* ---- what is available here ------------------------------------------------------------- */

/* 1 if a cache can run on `tracker` here; else 0 (not available here) or the negative errno
 * of a failure that is not about availability, with the reason in why[len]. */
int tracker_available(const char *tracker, char *why, size_t len);

/* For main(): 0 if `tracker` is available here; else prints why `prog` does not run and returns
 * VMT_TEST_SKIP, or 1 (a failure) if the cache failed for another reason. */
int skip_unless_tracker(const char *prog, const char *tracker);

/* For main(): 0 if io_uring works here, else prints why `prog` does not run and returns
 * VMT_TEST_SKIP (test/lib/iouring.c: link liburing). */
int skip_unless_iouring(const char *prog);

#endif
