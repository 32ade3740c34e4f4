/* vmtrack scenario suite: does a registration cache notice that the address space changed?
 *
 * A scenario registers a buffer through a *provider* (a registration cache plus the io_uring
 * fixed-buffer device), changes the address space under it, writes new bytes at the same
 * address, writes them to a file with IORING_OP_WRITE_FIXED using the fixed-buffer index the
 * provider returns, and reads the file back: old bytes mean the provider handed out a stale
 * registration (STALE), new bytes mean it noticed (CAUGHT).
 *
 * The provider is an interface so that the same scenarios run against vmtrack's cache
 * (scn_provider_vmtrack, in this library), Open MPI's rcache and UCX's ucs_rcache (their own
 * providers, written against this header). Everything here is C; link libscenarios.la
 * (noinst) and liburing.
 *
 * Every scenario runs in a forked child (scn_run), so a crash, a hang or a patched libc does not
 * leak into the caller or the next scenario. A provider's functions are therefore only ever
 * called in that child: setup once, get/put as often as needed, teardown once (fork scenario:
 * see fork_child). */
#ifndef VMTRACK_TEST_SCENARIO_H
#define VMTRACK_TEST_SCENARIO_H

#include <stddef.h>

#ifdef __cplusplus
extern "C" {
#endif

struct io_uring;

/* ---- providers ------------------------------------------------------------------------ */
struct scn_provider {
    const char *name;     /* "vmtrack", "ompi-rcache", "ucx-rcache", ... */

    /* Prepare to register memory for WRITE_FIXED on `ring` (already initialised by the
     * harness, with no fixed-buffer table yet: the provider creates it, e.g. with
     * scn_ring_table_create below or vmt_iouring_attach). `variant` selects what the provider
     * tracks with (vmtrack: the tracker name "hooks", "uffd", "kmod", "none", "pass"; others:
     * whatever they document, NULL = their default). Store private state in *ctx.
     * Returns 0; -ENOTSUP / -ENODEV when this variant is not available on this machine (then
     * write the reason, one line, into why[whylen]: the scenario is reported "unavailable",
     * never as a pass); any other negative errno is an error (why says what failed). */
    int  (*setup)(void **ctx, struct io_uring *ring, const char *variant,
                  char *why, size_t whylen);

    /* A registration valid now for at least [addr, addr+len), readable by the device.
     * *fixed_index: the buffer index for io_uring_prep_write_fixed on the ring given to setup;
     * *token: what put() receives. 0 or a negative errno. */
    int  (*get)(void *ctx, void *addr, size_t len, int *fixed_index, void **token);

    /* Release what get() returned. The provider may keep the registration cached: that is
     * the point of the suite. */
    void (*put)(void *ctx, void *token);

    /* Release everything (the process exits right after; must not crash). */
    void (*teardown)(void *ctx);

    /* Optional. Called in the child of a fork() made by the fork scenario, with the parent's
     * state and a fresh ring of the child's own (the parent's ring is shared with the parent
     * and must not be used). Set up *child_ctx to register on `ring` WITHOUT touching the
     * parent's registrations (no deregistration, no unregistering of the parent's table).
     * NULL: the harness calls setup(&child_ctx, ring, variant, ...) instead and never calls
     * teardown on the parent's state in the child. */
    int  (*fork_child)(void *parent_ctx, void **child_ctx, struct io_uring *ring,
                       const char *variant, char *why, size_t whylen);
};

/* vmtrack's own provider: a cache made with vmt_cache_create(.tracker = variant), and the
 * io_uring device (vmt_iouring_attach) on the ring. */
extern const struct scn_provider scn_provider_vmtrack;

/* ---- helpers for providers that manage the fixed-buffer table themselves -------------- */
/* A sparse fixed-buffer table on `ring` with `slots` entries and a thread-safe slot allocator.
 * scn_ring_slot_reg registers one buffer into a free slot (-ENOSPC when none is free);
 * scn_ring_slot_dereg empties the slot again. */
struct scn_ring_table;
int  scn_ring_table_create(struct io_uring *ring, unsigned slots, struct scn_ring_table **out);
void scn_ring_table_destroy(struct scn_ring_table *t);   /* unregisters the table */
int  scn_ring_slot_reg(struct scn_ring_table *t, void *addr, size_t len, int *slot);
void scn_ring_slot_dereg(struct scn_ring_table *t, int slot);

/* ---- scenarios ------------------------------------------------------------------------ */
enum scn_result {
    SCN_CAUGHT = 0,     /* the new bytes reached the file: the provider noticed the change */
    SCN_STALE,          /* the old bytes reached the file: a stale registration was used */
    SCN_NA,             /* not applicable here (reason in detail), e.g. address not reusable */
    SCN_ERROR,          /* something failed (detail says what): neither caught nor stale */
    SCN_UNAVAILABLE,    /* the provider/variant is not available on this machine (detail) */
    SCN_CRASH,          /* the child died or timed out (detail says how) */
};
const char *scn_result_name(enum scn_result r);   /* "caught", "STALE", "n/a", ... */

struct scn_outcome {
    enum scn_result result;
    char detail[240];
};

struct scn_scenario {
    const char *name;     /* short id: "munmap-mmap", "free-malloc", ... */
    const char *what;     /* one line for humans */
    /* Runs in the harness's child. Fills out->detail on anything but SCN_CAUGHT. */
    enum scn_result (*run)(const struct scn_provider *p, const char *variant,
                           struct scn_outcome *out);
};

extern const struct scn_scenario scn_scenarios[];
extern const size_t scn_scenario_count;
const struct scn_scenario *scn_find(const char *name);

/* Run one scenario in a forked child with a timeout (0: 20 s); the child is killed on
 * timeout. Returns 0 with *out filled (any result), or a negative errno if it could not fork. */
int scn_run(const struct scn_scenario *s, const struct scn_provider *p, const char *variant,
            unsigned timeout_ms, struct scn_outcome *out);

/* Does vmtrack's tracker `tracker` claim to catch scenario `scenario`? ("hooks": all but the
 * raw system call; "uffd", "kmod": all; "pass": all, since it caches nothing; "none": none.) */
int scn_vmtrack_claims(const char *tracker, const char *scenario);

/* ---- concurrency stress --------------------------------------------------------------- */
struct scn_stress_opts {
    unsigned workers;        /* threads doing get/fill/WRITE_FIXED/check/put (0: 2) */
    unsigned mutators;       /* threads unmapping/remapping/freeing/mallocing (0: 2) */
    unsigned slots;          /* buffers shared by all threads (0: 16) */
    unsigned duration_ms;    /* 0: 2000 */
    unsigned long min_writes;/* keep going past duration_ms until this many writes... */
    unsigned max_ms;         /* ...but never past this (0: 10 x duration_ms) */
    int stop_on_stale;       /* end as soon as one stale or wrong write is seen */
};
struct scn_stress_result {
    unsigned long writes;    /* WRITE_FIXED operations checked */
    unsigned long judged;    /* of which had no concurrent change, so must be exact */
    unsigned long stale;     /* judged writes that found old bytes */
    unsigned long errors;    /* anything else wrong (I/O errors, wrong bytes) */
    unsigned long mutations; /* address-space changes made */
    char detail[240];
};
/* In the calling process (no fork): setup the provider with `variant`, run, teardown.
 * 0, -ENOTSUP/-ENODEV (unavailable, detail says why) or a negative errno. */
int scn_stress(const struct scn_provider *p, const char *variant,
               const struct scn_stress_opts *opts, struct scn_stress_result *res);

/* The stress as a scenario for scn_run (not in scn_scenarios[]): caught when every write was
 * right, STALE when one found old bytes, ERROR for anything else; it runs for
 * scn_stress_scenario_ms (default 2000). */
extern const struct scn_scenario scn_stress_scenario;
extern unsigned scn_stress_scenario_ms;

#ifdef __cplusplus
}
#endif
#endif
