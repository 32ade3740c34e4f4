/* The event feed (ucx_feed.c): whether the module is on in this process, with which tracker
 * and in which mode, and the subscriber that hands vmtrack's address-space events to UCX.
 * The module's other parts (rcache_watch.c, rcache_native.c) read it; it calls neither. */
#ifndef VMTRACK_UCX_FEED_H
#define VMTRACK_UCX_FEED_H

#include <stdatomic.h>
#include <stddef.h>
#include <stdint.h>

#include "vmtrack.h"
#include "vmtrack_ucx.h"

void ucx_log(int level, const char *fmt, ...) __attribute__((format(printf, 2, 3)));

/* The mode decided at init (vmt_ucx_init() runs it first). */
enum vmt_ucx_mode ucx_feed_mode(void);
const char *ucx_feed_tracker(void);
/* VMT_UCX_SYNC: the module's private hooks cache, where a registration waits while an unmap
 * of its range is in flight. */
struct vmt_cache *ucx_feed_sync_cache(void);
/* Bumped in the child after fork(). */
unsigned ucx_feed_fork_gen(void);

/* vmt_subscribe callback: the range goes to every UCX cache (ucm_vm_munmap), in WATCH mode at
 * the next ucx_feed_drain. */
void ucx_feed_on_event(void *arg, const void *addr, size_t len);
/* WATCH: give UCX the ranges reported since the last call (no lock of UCX's may be held) */
void ucx_feed_drain(void);
/* An invalidation the module gave UCX itself (a stale hit found), counted as an event. */
void ucx_feed_note_event(void);
/* Events reported so far, given to UCX or queued (acquire): a reader that sees it unchanged
 * after a check knows no event came in between. */
uint64_t ucx_feed_events(void);

/* SYNC: whether ucm's own test sees unmap events arrive (another patcher may have replaced
 * vmtrack's hooks); says why not, for the rcache `name`, when they do not. */
int ucx_feed_reaches_ucx(const char *name);

/* What the rcache parts count, for vmt_ucx_stats_get(). */
struct ucx_counters {
    _Atomic uint64_t rcaches, watches, stale, stale_lookups, native, forwarded, refused;
};
extern struct ucx_counters ucx_counters;

#endif
