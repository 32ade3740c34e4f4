/* An MPI job (mpirun -np 2 --mca rcache vmtrack, on the host: vader, or pml ucx) that checks,
 * in each rank, that vmtrack's hooks are the process's only memory patcher and that Open MPI's
 * and UCX's consumers still get the unmap events:
 *  - every libc entry Open MPI's patcher would patch jumps into libvmtrack;
 *  - a module creation (which opens Open MPI's memory framework) does not change that;
 *  - an opal_mem_hooks user (what grdma, common_ucx and osc are) sees an munmap once;
 *  - with pml ucx (VMT_EXPECT_UCM_EVENTS=1), a ucm VM_UNMAPPED handler (what UCX's
 *    registration caches subscribe to) sees it;
 *  - messages between the ranks arrive intact while the buffers are unmapped and mapped again.
 * With VMT_EXPECT_TAKEOVER=0 (test/ompi/takeover_gates.sh: a condition of the takeover is not
 * met) the opposite: no entry jumps into libvmtrack, Open MPI's patcher feeds its users as
 * before. Run by test/ompi/mpirun_host.sh and takeover_gates.sh.
 * Exit status: 0 all right, 1 a check failed, 2 setup error. */
#include <dlfcn.h>
#include <stdbool.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <mpi.h>

#include "opal_config.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/memoryhooks/memory.h"

#include "ompi-rcache/entry_owner.h"

#define MSG_BYTES (4u << 20)
#define ROUNDS 10

static int rank;
static int failures;
static bool expect_takeover = true;

static void fail(const char *what, const char *detail)
{
    fprintf(stderr, "rank %d: FAIL: %s%s%s\n", rank, what, detail ? ": " : "",
            detail ? detail : "");
    failures++;
}

/* ---- who owns libc's entries --------------------------------------------------------------- */

static void check_entries(const char *when)
{
    static const char *const fns[] = {"mmap", "munmap", "mremap", "madvise", "brk", "shmat",
                                      "shmdt"};
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    if (!libc) {
        fail("libc.so.6 not found", dlerror());
        return;
    }
    char line[512] = "";
    for (size_t i = 0; i < sizeof(fns) / sizeof(fns[0]); i++) {
        const char *owner = vmt_ompi_entry_owner(dlsym(libc, fns[i]));
        const char *base = strrchr(owner, '/');
        size_t used = strlen(line);
        snprintf(line + used, sizeof(line) - used, " %s->%s", fns[i], base ? base + 1 : owner);
        if (expect_takeover != (NULL != strstr(owner, "libvmtrack")))
            fail(expect_takeover ? "an entry does not jump into libvmtrack"
                                 : "an entry jumps into libvmtrack without a takeover", fns[i]);
    }
    dlclose(libc);
    printf("rank %d: %s:%s\n", rank, when, line);
}

/* ---- the event consumers ------------------------------------------------------------------- */

static char *watched;
static size_t watched_len;
static int opal_events, ucm_events;

static bool in_watched(const void *p, size_t len)
{
    const char *a = p;
    return watched && a < watched + watched_len && a + len > watched;
}

static void opal_cb(void *buf, size_t len, void *cbdata, bool from_alloc)
{
    (void) cbdata;
    (void) from_alloc;
    if (in_watched(buf, len))
        __atomic_fetch_add(&opal_events, 1, __ATOMIC_RELAXED);
}

/* ucm's handler type and the two values used (ucm/api/ucm.h of UCX 1.13), without linking UCX:
 * it must not be loaded before MPI_Init, or vmtrack rightly refuses to take over. */
enum { VMT_UCM_EVENT_VM_UNMAPPED = 1 << 17, VMT_UCM_EVENT_FLAG_NO_INSTALL = 1 << 24 };
struct vmt_ucm_vm_unmapped { void *address; size_t size; };
typedef void (*vmt_ucm_cb)(int event, void *event_data, void *arg);
typedef int (*vmt_ucm_set_event_handler_fn)(int events, int priority, vmt_ucm_cb cb, void *arg);
typedef void (*vmt_ucm_unset_event_handler_fn)(int events, vmt_ucm_cb cb, void *arg);

static void ucm_cb(int event, void *event_data, void *arg)
{
    (void) arg;
    const struct vmt_ucm_vm_unmapped *u = event_data;
    if (VMT_UCM_EVENT_VM_UNMAPPED == event && in_watched(u->address, u->size))
        __atomic_fetch_add(&ucm_events, 1, __ATOMIC_RELAXED);
}

static void check_events(void)
{
    if (OPAL_SUCCESS != opal_mem_hooks_register_release(opal_cb, NULL)) {
        fail("opal_mem_hooks_register_release refused: no memory-hook support", NULL);
        return;
    }
    void *ucm = dlopen("libucm.so.0", RTLD_NOW | RTLD_NOLOAD);
    vmt_ucm_set_event_handler_fn set = ucm ? (vmt_ucm_set_event_handler_fn) dlsym(ucm,
                                                 "ucm_set_event_handler") : NULL;
    vmt_ucm_unset_event_handler_fn unset = ucm ? (vmt_ucm_unset_event_handler_fn) dlsym(ucm,
                                                     "ucm_unset_event_handler") : NULL;
    if (set && 0 != set(VMT_UCM_EVENT_VM_UNMAPPED | VMT_UCM_EVENT_FLAG_NO_INSTALL, 0, ucm_cb,
                        NULL)) {
        fail("ucm_set_event_handler failed", NULL);
        set = NULL;
    }
    watched_len = 1u << 20;
    watched = mmap(NULL, watched_len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                   -1, 0);
    if (MAP_FAILED == watched) {
        fail("mmap", NULL);
        return;
    }
    memset(watched, 1, watched_len);
    munmap(watched, watched_len);
    printf("rank %d: munmap seen by an opal_mem_hooks user %d time(s), by ucm's VM_UNMAPPED "
           "handler %d time(s)%s\n", rank, opal_events, ucm_events,
           set ? "" : " (UCX not loaded)");
    if (1 != opal_events)
        fail("the opal_mem_hooks user did not see the munmap exactly once", NULL);
    /* Asserted where Open MPI drives UCX (pml ucx: common_ucx hands Open MPI's events to ucm).
     * (Without the takeover, Open MPI's patcher writes over ucm's hooks when it opens after UCX
     * loaded, and ucm's handlers then see nothing: Open MPI's own business.) */
    const char *want_ucm = getenv("VMT_EXPECT_UCM_EVENTS");
    if (want_ucm && 0 == strcmp(want_ucm, "1") && ucm_events < 1)
        fail("UCX's VM_UNMAPPED handler did not see the munmap", set ? NULL : "UCX not loaded");
    watched = NULL;
    if (set && unset)
        unset(VMT_UCM_EVENT_VM_UNMAPPED, ucm_cb, NULL);
    if (ucm)
        dlclose(ucm);
    opal_mem_hooks_unregister_release(opal_cb);
}

/* A module creation opens Open MPI's memory framework (where its patcher lives). */
static int fake_reg(void *d, void *b, size_t s, mca_rcache_base_registration_t *r)
{
    (void) d, (void) b, (void) s, (void) r;
    return OPAL_SUCCESS;
}
static int fake_dereg(void *d, mca_rcache_base_registration_t *r)
{
    (void) d, (void) r;
    return OPAL_SUCCESS;
}

static void open_memory_framework(void)
{
    mca_rcache_base_resources_t res = {
        .cache_name = "hooks-check", .sizeof_reg = sizeof(mca_rcache_base_registration_t),
        .register_mem = fake_reg, .deregister_mem = fake_dereg,
    };
    mca_rcache_base_module_t *m = mca_rcache_base_module_create("vmtrack", NULL, &res);
    if (!m)
        fail("mca_rcache_base_module_create(\"vmtrack\") failed", NULL);
    else
        mca_rcache_base_module_destroy(m);
}

/* ---- messages over remapped buffers --------------------------------------------------------- */

static int pingpong(int peer)
{
    size_t n = MSG_BYTES / sizeof(uint64_t);
    uint64_t *buf = mmap(NULL, MSG_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                         -1, 0);
    if (MAP_FAILED == buf)
        return -1;
    int bad_rounds = 0;
    for (int round = 0; round < ROUNDS; round++) {
        uint64_t seed = (uint64_t) round * 2 + 1;
        if (0 == rank) {
            for (size_t i = 0; i < n; i++)
                buf[i] = seed * 0x9E3779B97F4A7C15ull + i;
            MPI_Send(buf, (int) n, MPI_UINT64_T, peer, round, MPI_COMM_WORLD);
        } else {
            memset(buf, 0, MSG_BYTES);
            MPI_Recv(buf, (int) n, MPI_UINT64_T, peer, round, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            size_t bad = 0;
            for (size_t i = 0; i < n; i++)
                bad += buf[i] != seed * 0x9E3779B97F4A7C15ull + i;
            bad_rounds += bad != 0;
        }
        /* new pages at the same address: a stale registration would move the old ones */
        munmap(buf, MSG_BYTES);
        void *again = mmap(buf, MSG_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                           -1, 0);
        if (MAP_FAILED == again)
            return -1;
        buf = again;
    }
    munmap(buf, MSG_BYTES);
    return bad_rounds;
}

int main(int argc, char **argv)
{
    const char *expect = getenv("VMT_EXPECT_TAKEOVER");
    expect_takeover = !(expect && 0 == strcmp(expect, "0"));
    if (MPI_SUCCESS != MPI_Init(&argc, &argv))
        return 2;
    int size = 0;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    check_entries("after MPI_Init");
    open_memory_framework();
    check_entries("after the memory framework opened");
    check_events();
    if (2 == size) {
        int bad = pingpong(1 - rank);
        printf("rank %d: %d rounds of %u MiB over remapped buffers, %d bad\n", rank, ROUNDS,
               MSG_BYTES >> 20, bad);
        if (0 != bad)
            fail("messages arrived wrong", NULL);
    }
    fflush(stdout);
    MPI_Finalize();
    /* after MPI_Finalize (the component was unloaded): libc still jumps into vmtrack's hooks */
    void *p = mmap(NULL, 1 << 16, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (MAP_FAILED != p)
        munmap(p, 1 << 16);
    return failures ? 1 : 0;
}
