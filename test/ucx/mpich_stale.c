/* A 2-rank MPI job for Debian's MPICH (ch4:ucx): do UCX's registration caches ever let rank 0
 * send the bytes of pages that are no longer its buffer's?
 *
 * Rank 0 sends a large buffer (rendezvous, zero-copy over rc_verbs: UCX registers the source
 * pages through its ib md's rcache, and the peer reads them by RDMA) to rank 1 every round.
 * Between rounds the buffer is refilled in place, or its pages are replaced at the same address
 * (through libc, which UCX's hooks and vmtrack's hooks see, or with raw system calls, which
 * only the kernel sees) and filled with the new round's bytes. Rank 1 checks every byte: a byte
 * of an earlier round is stale (the NIC read old pages through a registration the cache should
 * have dropped), any other wrong byte is lost data.
 *
 * Prints one line per kind of change (stale and wrong bytes) from rank 1, and from rank 0 what
 * vmtrack served when libvmtrack-ucx is preloaded (looked up with dlsym: the job itself does
 * not link vmtrack, so the same binary runs on stock UCX). --changes libc leaves out the raw
 * system calls (for the hooks tracker, which cannot see them: after one missed change every
 * later round would be stale too).
 * Exit 0, without --expect-vmtrack, when the job ran (the bytes are shown, not judged); with
 * it, when every byte was right and vmtrack registered the source of every fresh set of pages;
 * with --expect-cached also, that it was cached: on UCX 1.13 a vmtrack hit and an invalidation
 * for each change, from 1.14 on no registration in the rounds whose pages were kept (served
 * uncached, nothing could be stale and the check would prove nothing). From 1.14 on rank 0
 * prints UCT's registrations of the source per round, per kind of change before the round.
 * "Registered" is vmtrack's count on 1.13, where vmtrack serves the ib md's cache, and UCT's
 * registrations of the buffer from 1.14 on (the module counts those covering the range the
 * job names with vmt_ucx_witness). Rank 0 prints the verdict of both ranks before
 * MPI_Finalize ("mpich_stale: verdict: pass|fail").
 * 1 otherwise, 2 on a usage or setup error.
 *
 * Usage (N < 255: a byte names its round mod 256):
 *   mpich_stale [--rounds N] [--kib K] [--changes all|libc] [--expect-vmtrack [--expect-cached]]
 */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <mpi.h>

#include "vmtrack.h"
#include "vmtrack_ucx.h"

#include "../lib/stale_rounds.h"

struct options {
    int rounds;
    size_t len;
    int expect_vmtrack;
    int expect_cached;
    int kinds;       /* the changes made: the first `kinds` of enum change */
};

/* Rank 0, with the module: UCT's registrations of the source in the first round and, after
 * it, per kind of change made before the round (vmt_ucx_witness's count around each send). */
struct regs_tally {
    int known;
    unsigned long long first, regs[N_CHANGES];
    unsigned rounds[N_CHANGES];
};
static struct regs_tally g_regs;

static long long source_registrations(void)
{
    static int (*stats)(struct vmt_ucx_stats *);
    struct vmt_ucx_stats us = {.sz = sizeof(us)};
    if (!stats)
        stats = (int (*)(struct vmt_ucx_stats *))dlsym(RTLD_DEFAULT, "vmt_ucx_stats_get");
    return stats && stats(&us) == 0 ? (long long)us.witness_registrations : -1;
}

static int run_sender(const struct options *o)
{
    unsigned char *buf = mmap(NULL, o->len, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED)
        return 2;
    /* with the module: count UCT's registrations of the buffer (proof of zero-copy) */
    int (*witness)(const void *, size_t) =
        (int (*)(const void *, size_t))dlsym(RTLD_DEFAULT, "vmt_ucx_witness");
    if (witness)
        witness(buf, o->len);
    int ret = 0;
    for (int r = 0; r < o->rounds && ret == 0; r++) {
        ret = replace_pages(buf, o->len, change_before(o->kinds, r)) ? 2 : 0;
        fill_round(buf, o->len, r);
        int ok = ret == 0;
        /* rank 1 must not wait for a message a failed replacement never sends */
        MPI_Send(&ok, 1, MPI_INT, 1, 2 * r, MPI_COMM_WORLD);
        long long before = source_registrations();
        if (ok)
            MPI_Send(buf, (int)o->len, MPI_BYTE, 1, 2 * r + 1, MPI_COMM_WORLD);
        long long after = source_registrations();
        /* the send returned: the peer has read the source, so its registration is counted */
        g_regs.known = before >= 0 && after >= before;
        if (g_regs.known && r == 0)
            g_regs.first = (unsigned long long)(after - before);
        else if (g_regs.known) {
            g_regs.regs[change_before(o->kinds, r)] += (unsigned long long)(after - before);
            g_regs.rounds[change_before(o->kinds, r)]++;
        }
    }
    munmap(buf, o->len);
    return ret;
}

static int run_receiver(const struct options *o, struct stale_tally *t)
{
    unsigned char *buf = malloc(o->len);
    if (!buf)
        return 2;
    for (int r = 0; r < o->rounds; r++) {
        int ok = 0;
        MPI_Recv(&ok, 1, MPI_INT, 0, 2 * r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        if (!ok) {
            free(buf);
            return 2;
        }
        fill_round(buf, o->len, r + 1);   /* bytes nobody sent are "wrong", never "stale" */
        MPI_Recv(buf, (int)o->len, MPI_BYTE, 0, 2 * r + 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        tally_round(t, change_before(o->kinds, r), buf, o->len, r);
    }
    free(buf);
    return 0;
}

/* Rank 1's tally; with --expect-vmtrack any wrong byte fails. */
static int judge_bytes(const struct options *o, const struct stale_tally *t)
{
    return print_tally(t, o->kinds) && o->expect_vmtrack;
}

static int expect_served(const struct options *o, const struct vmt_stats *vs,
                         unsigned long long changes);
static int expect_fed(const struct options *o, const struct vmt_ucx_stats *us,
                      unsigned long long changes);

/* What vmtrack served in rank 0, if libvmtrack-ucx is in the process; -1 when it is not. */
static int vmtrack_report(const struct options *o)
{
    int (*ucx_stats)(struct vmt_ucx_stats *) =
        (int (*)(struct vmt_ucx_stats *))dlsym(RTLD_DEFAULT, "vmt_ucx_stats_get");
    const char *(*ucx_tracker)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT,
                                                                    "vmt_ucx_tracker");
    struct vmt_cache *(*shared)(void) = (struct vmt_cache * (*)(void))dlsym(RTLD_DEFAULT,
                                                                             "vmt_shared");
    int (*stats)(struct vmt_cache *, struct vmt_stats *) =
        (int (*)(struct vmt_cache *, struct vmt_stats *))dlsym(RTLD_DEFAULT, "vmt_stats_get");
    if (!ucx_stats || !ucx_tracker || !shared || !stats) {
        printf("rank 0: libvmtrack-ucx is not loaded (stock UCX)%s\n",
               o->expect_vmtrack ? ": FAIL, it was expected" : "");
        return o->expect_vmtrack ? 1 : -1;
    }
    struct vmt_ucx_stats us = {.sz = sizeof(us)};
    struct vmt_stats vs = {.sz = sizeof(vs)};
    if (ucx_stats(&us) < 0 || stats(shared(), &vs) < 0) {
        printf("rank 0: FAIL: vmtrack's statistics could not be read\n");
        return 1;
    }
    printf("rank 0: vmtrack-ucx tracker %s: %llu rcaches on vmtrack, %llu created by libucs; "
           "vmt_shared: %llu registrations (%llu uncached), %llu hits, %llu invalidations\n",
           ucx_tracker(), (unsigned long long)us.native_rcaches,
           (unsigned long long)us.forwarded_rcaches, (unsigned long long)vs.registrations,
           (unsigned long long)vs.uncached, (unsigned long long)vs.hits,
           (unsigned long long)vs.invalidations);
    printf("rank 0: UCT registered the source %llu times in %d rounds (%llu registrations in "
           "all); UCX rcaches refused %llu, watched %llu; UCX regions watched %llu, hits found "
           "stale by the module %llu (%llu of them in UCP's inline lookup)\n",
           (unsigned long long)us.witness_registrations, o->rounds,
           (unsigned long long)us.uct_registrations, (unsigned long long)us.refused_rcaches,
           (unsigned long long)us.rcaches, (unsigned long long)us.watches,
           (unsigned long long)us.stale, (unsigned long long)us.stale_lookups);
    if (!o->expect_vmtrack)
        return 0;
    unsigned long long changes = 0;
    for (int r = 1; r < o->rounds; r++)
        changes += change_before(o->kinds, r) != KEEP;
    if (!strcmp(ucx_tracker(), "off")) {
        printf("rank 0: FAIL: libvmtrack-ucx is off\n");
        return 1;
    }
    const char *(*release)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "vmt_ucx_release");
    if (release && !strncmp(release(), "1.13.", 5) && !us.native_rcaches) {
        printf("rank 0: FAIL: UCX 1.13: expected the ib md's rcache on vmtrack\n");
        return 1;
    }
    return us.native_rcaches ? expect_served(o, &vs, changes) : expect_fed(o, &us, changes);
}

/* UCX 1.13: the ib md's rcache on vmtrack, which registered every fresh set of pages (the
 * first and each replacement), or the bytes were not checked through it. */
static int expect_served(const struct options *o, const struct vmt_stats *vs,
                         unsigned long long changes)
{
    int fail = vs->registrations < changes + 1;
    if (fail)
        printf("rank 0: FAIL: expected at least %llu registrations by vmtrack\n", changes + 1);
    if (o->expect_cached && (vs->hits == 0 || vs->invalidations < changes)) {
        printf("rank 0: FAIL: expected vmtrack to cache the source (hits) and drop it at each "
               "of the %llu changes (invalidations)\n", changes);
        fail = 1;
    }
    return fail;
}

/* UCX 1.14 on: UCP's own cache, fed by vmtrack (hooks) or watched and checked (kmod, uffd),
 * or none (where the checks cannot be set up). UCT must have registered the source itself
 * (zero-copy) for every fresh set of pages: in every round after a change; without a cache,
 * every round; with one (--expect-cached), in no round whose pages were kept (a hit). */
static int expect_fed(const struct options *o, const struct vmt_ucx_stats *us,
                      unsigned long long changes)
{
    unsigned long long regs = us->witness_registrations;
    int fail = regs < changes + 1;
    printf("rank 0: UCT registrations of the source per round: first round %llu", g_regs.first);
    for (int c = 0; c < o->kinds; c++)
        if (g_regs.rounds[c])
            printf(", after %s %.2f (%u rounds)", change_name((enum change)c),
                   (double)g_regs.regs[c] / g_regs.rounds[c], g_regs.rounds[c]);
    printf("; %.2f per round in all\n", (double)regs / o->rounds);
    for (int c = 1; c < o->kinds; c++)
        if (g_regs.regs[c] < g_regs.rounds[c]) {
            printf("rank 0: FAIL: after %s the source was registered in fewer than its %u "
                   "rounds (the new pages were not registered: zero-copy not proven)\n",
                   change_name((enum change)c), g_regs.rounds[c]);
            fail = 1;
        }
    if (o->expect_cached && g_regs.regs[KEEP] != 0) {
        printf("rank 0: FAIL: expected UCX's cache to serve the unchanged source in all %u "
               "keep rounds without registering it (%llu registrations)\n",
               g_regs.rounds[KEEP], g_regs.regs[KEEP]);
        fail = 1;
    }
    if (fail)
        printf("rank 0: FAIL: expected UCT to register the source at least %llu times "
               "(zero-copy)\n", changes + 1);
    if (us->refused_rcaches && regs < (unsigned long long)o->rounds) {
        printf("rank 0: FAIL: UCX had no cache, yet registered the source in fewer than %d "
               "rounds\n", o->rounds);
        fail = 1;
    }
    if (o->expect_cached && regs >= (unsigned long long)o->rounds) {
        printf("rank 0: FAIL: expected UCX's cache to serve the source between changes\n");
        fail = 1;
    }
    return fail;
}

static int parse(int argc, char **argv, struct options *o)
{
    *o = (struct options){.rounds = 21, .len = 1u << 20, .kinds = N_CHANGES};
    for (int i = 1; i < argc; i++) {
        if (!strcmp(argv[i], "--rounds") && i + 1 < argc)
            o->rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kib") && i + 1 < argc)
            o->len = (size_t)atol(argv[++i]) << 10;
        else if (!strcmp(argv[i], "--expect-vmtrack"))
            o->expect_vmtrack = 1;
        else if (!strcmp(argv[i], "--expect-cached"))
            o->expect_cached = 1;
        else if (!strcmp(argv[i], "--changes") && i + 1 < argc && !strcmp(argv[i + 1], "all"))
            o->kinds = N_CHANGES, i++;
        else if (!strcmp(argv[i], "--changes") && i + 1 < argc && !strcmp(argv[i + 1], "libc"))
            o->kinds = RAW_REMAP, i++;
        else
            return -1;
    }
    if (o->expect_cached && !o->expect_vmtrack)
        return -1;
    return o->rounds >= 1 && o->rounds < 255 && o->len >= 4096 && o->len <= (1u << 30) ? 0 : -1;
}

int main(int argc, char **argv)
{
    setvbuf(stdout, NULL, _IOLBF, 0);
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    struct options o;
    if (parse(argc, argv, &o) < 0 || size != 2) {
        if (rank == 0)
            fprintf(stderr, "usage: mpiexec -n 2 mpich_stale [--rounds N] [--kib K] "
                            "[--changes all|libc] [--expect-vmtrack [--expect-cached]]\n");
        MPI_Finalize();
        return 2;
    }
    struct stale_tally t;
    memset(&t, 0, sizeof(t));
    int ret = rank == 0 ? run_sender(&o) : run_receiver(&o, &t);
    if (ret == 0 && rank == 1)
        ret = judge_bytes(&o, &t);
    if (ret == 0 && rank == 0)
        ret = vmtrack_report(&o) > 0;
    int worst = 0;
    MPI_Allreduce(&ret, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    /* both ranks' judgement, before MPI_Finalize (what UCX does at teardown is not the job's) */
    if (rank == 0)
        printf("mpich_stale: verdict: %s\n", worst ? "fail" : "pass");
    MPI_Finalize();
    return worst;
}
