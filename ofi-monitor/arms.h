/* Armed watches: what closes libfabric's register-then-subscribe window.
 *
 * libfabric 1.17 registers a new entry (the provider's add_region, ibv_reg_mr) before it calls
 * subscribe, and tells the monitor nothing before. A watch taken at subscribe may therefore be
 * younger than the pages the provider pinned: if the range was replaced in between, the new
 * watch sees only the new pages and the entry would be cached stale.
 *
 * So subscribe caches an entry only under a watch it knew before the registration began: an
 * *armed* watch for exactly that range, armed (held here) before the calling thread's previous
 * call into the monitor returned. The provider registers after that call returned (same thread:
 * libfabric registers and subscribes in the thread that called fi_mr_reg), so the armed watch
 * was in place before the pages were pinned; still being the range's live watch at subscribe
 * means the tracker saw no change of the range since, pins included. A subscribe that finds no
 * such watch arms the one it took and refuses (libfabric uses that MR once, uncached); the
 * next registration of the range by that thread is cached. valid() arms the range's current
 * watch when it answers false, so a range registered again after a change is cached at once.
 *
 * Ticks: a process-wide clock advanced by every arming; each thread remembers the clock as it
 * left its last monitor call. An arm whose tick is at most that mark was armed before.
 *
 * Where the tracker hears every change before it happens (hooks), the watch cache also keeps
 * a log of those changes (vmt_changes_mark): each thread remembers the log's mark as it left
 * its last call, and a subscribe whose range the log shows unchanged since then is cached at
 * once, armed or not (the pages pinned after that call are the ones its watch now covers).
 * kmod and uffd do not see changes of ranges nobody watched: there the arms decide alone.
 *
 * Fixed size, direct-mapped by a hash of the range (an arm that collides replaces the older:
 * the range is refused once more, never served stale). Under a mutex: armed from subscribe and
 * from a valid() that said false, both slow paths, never while calling libfabric. */
#ifndef VMTRACK_OFI_ARMS_H
#define VMTRACK_OFI_ARMS_H

#include <pthread.h>
#include <stdbool.h>
#include <stddef.h>
#include <stdint.h>

struct vmt_cache;
struct vmt_reg;

struct vmt_ofi_arm {
    uintptr_t addr;
    size_t len;
    struct vmt_reg *watch;   /* held; NULL: empty */
    uint64_t tick;
};

struct vmt_ofi_arms {
    struct vmt_ofi_arm *v;
    size_t n;                /* a power of two */
    pthread_mutex_t lock;
};

int  vmt_ofi_arms_init(struct vmt_ofi_arms *a, size_t n);
void vmt_ofi_arms_fini(struct vmt_ofi_arms *a);   /* releases every held watch */

/* true: `watch` is the range's armed watch, armed before this thread's previous monitor call
 * ended (the caller keeps its hold). false: it is not; it is armed now and the table takes the
 * caller's hold. */
bool vmt_ofi_arms_trust(struct vmt_ofi_arms *a, uintptr_t addr, size_t len,
                       struct vmt_reg *watch);

/* Arm `watch` for the range (takes the caller's hold; releases the one it replaces). Re-arming
 * the watch already armed keeps the older tick and releases the caller's hold. */
void vmt_ofi_arms_set(struct vmt_ofi_arms *a, uintptr_t addr, size_t len, struct vmt_reg *watch);

/* At the end of every monitor call (start, subscribe, valid): remember the clock for this
 * thread, and where the watch cache keeps a change log (wcache given, hooks tracker), the
 * log's mark. */
void vmt_ofi_arms_call_ends(struct vmt_cache *wcache);

/* Whether this thread's mark (its previous call's end) proves the range unchanged since:
 * true only if the watch cache's log says no change overlapped it (see vmt_changed_since).
 * Call after the range's watch was taken. */
bool vmt_ofi_unchanged_since_call(struct vmt_cache *wcache, uintptr_t addr, size_t len);

#endif
