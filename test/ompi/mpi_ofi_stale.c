/* A 2-rank Open MPI job over libfabric (mtl ofi, or btl ofi under pml ob1; verbs;ofi_rxm on
 * soft-RoCE in the guest rig): can rank 0 send bytes of pages that are no longer its buffer's?
 *
 * Rank 0 sends a 1 MiB buffer to rank 1 every round: above ofi_rxm's rendezvous threshold, so
 * the provider registers the source pages and the peer reads them by RDMA (mtl ofi: rxm
 * registers through the verbs domain's MR cache; btl ofi: pml ob1 registers through the rcache
 * framework's "grdma", which vmtrack serves with --mca rcache vmtrack). Before each round the
 * buffer is refilled in place or its pages are replaced at the same address, through libc or
 * with raw system calls (which only the kernel sees). Rank 1 checks every byte: a byte of an
 * earlier round is stale, any other wrong byte is lost.
 *
 * --expect none     the bytes are shown, not judged (the stock run)
 * --expect monitor  0 wrong bytes, vmtrack's libfabric monitor (libvmtrack-ofi) imported, and
 *                   the provider registered the source itself for every fresh set of pages
 *                   (the monitor's witness counts subscribes of the buffer: zero-copy)
 * --expect rcache   0 wrong bytes, and vmtrack's shared cache made a registration for every
 *                   fresh set of pages (btl ofi's registrations through the rcache framework)
 * vmtrack's libraries are looked up in the process (dlopen RTLD_NOLOAD): the job links none,
 * so the same binary runs on stock Open MPI.
 * Exit 0 when the expectation holds, 1 when not, 2 on a usage or setup error.
 * Usage (N < 255: a byte names its round mod 256):
 *   mpi_ofi_stale [--rounds N] [--kib K] [--changes all|libc] [--expect none|monitor|rcache] */
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
#include "vmtrack_ofi.h"

#include "../lib/stale_rounds.h"

enum expect { EXPECT_NONE, EXPECT_MONITOR, EXPECT_RCACHE };

struct options {
    int rounds, kinds;
    size_t len;
    enum expect expect;
};

/* vmtrack's libfabric monitor, if it is in the process (preloaded or imported). */
static void *ofi_lib(void)
{
    return dlopen("libvmtrack-ofi.so.0", RTLD_NOW | RTLD_NOLOAD);
}

static int run_sender(const struct options *o)
{
    unsigned char *buf = mmap(NULL, o->len, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (buf == MAP_FAILED)
        return 2;
    void *lib = ofi_lib();
    int (*witness)(const void *, size_t) = lib ? dlsym(lib, "vmt_ofi_witness") : NULL;
    if (witness)
        witness(buf, o->len);
    int ret = 0;
    for (int r = 0; r < o->rounds && ret == 0; r++) {
        ret = replace_pages(buf, o->len, change_before(o->kinds, r)) ? 2 : 0;
        fill_round(buf, o->len, r);
        int ok = ret == 0;
        /* rank 1 must not wait for a message a failed replacement never sends */
        MPI_Send(&ok, 1, MPI_INT, 1, 2 * r, MPI_COMM_WORLD);
        if (ok)
            MPI_Send(buf, (int)o->len, MPI_BYTE, 1, 2 * r + 1, MPI_COMM_WORLD);
    }
    munmap(buf, o->len);
    return ret;
}

/* Rank 1: receives and tallies every round; with an expectation any wrong byte fails. */
static int run_receiver(const struct options *o)
{
    struct stale_tally t;
    memset(&t, 0, sizeof(t));
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
        tally_round(&t, change_before(o->kinds, r), buf, o->len, r);
    }
    free(buf);
    return print_tally(&t, o->kinds) && o->expect != EXPECT_NONE;
}

/* Rank 0: what the monitor saw; with --expect monitor, a registration of every fresh set of
 * the buffer's pages by the provider itself. */
static int monitor_report(const struct options *o, unsigned long long fresh)
{
    void *lib = ofi_lib();
    int (*state)(char *, size_t) = lib ? dlsym(lib, "vmt_ofi_state") : NULL;
    int (*stats)(struct vmt_ofi_stats *) = lib ? dlsym(lib, "vmt_ofi_stats_get") : NULL;
    const char *(*tracker)(void) = lib ? dlsym(lib, "vmt_ofi_tracker") : NULL;
    char why[256] = "";
    struct vmt_ofi_stats s = {.sz = sizeof(s)};
    if (!state || !stats || !tracker || state(why, sizeof(why)) != 1 || stats(&s) < 0) {
        printf("rank 0: vmtrack's libfabric monitor is not in use%s%s%s\n", why[0] ? ": " : "",
               why, o->expect == EXPECT_MONITOR ? " (FAIL: it was expected)" : "");
        return o->expect == EXPECT_MONITOR;
    }
    printf("rank 0: libvmtrack-ofi (tracker %s): the provider registered the source %llu times "
           "in %d rounds, %llu cache hits checked on it; %llu subscribes (%llu refused, %llu "
           "unarmed), %llu valids (%llu false), %llu events, %llu notifies\n", tracker(),
           (unsigned long long)s.witness_subscribes, o->rounds,
           (unsigned long long)s.witness_valids, (unsigned long long)s.subscribes,
           (unsigned long long)s.subscribes_refused, (unsigned long long)s.subscribes_unarmed,
           (unsigned long long)s.valids, (unsigned long long)s.valids_false,
           (unsigned long long)s.events, (unsigned long long)s.notifies);
    if (o->expect == EXPECT_MONITOR && s.witness_subscribes < fresh) {
        printf("rank 0: FAIL: expected the provider to register the source at least %llu times "
               "(zero-copy)\n", fresh);
        return 1;
    }
    return 0;
}

/* Rank 0: what vmtrack's shared cache served (the rcache component's registrations). */
static int rcache_report(const struct options *o, unsigned long long fresh)
{
    void *lib = dlopen("libvmtrack.so.0", RTLD_NOW | RTLD_NOLOAD);
    struct vmt_cache *(*shared)(void) = lib ? dlsym(lib, "vmt_shared") : NULL;
    int (*stats)(struct vmt_cache *, struct vmt_stats *) = lib ? dlsym(lib, "vmt_stats_get") : NULL;
    const char *(*tracker)(struct vmt_cache *) = lib ? dlsym(lib, "vmt_cache_tracker") : NULL;
    struct vmt_stats s = {.sz = sizeof(s)};
    struct vmt_cache *c = shared && stats && tracker ? shared() : NULL;
    if (!c || stats(c, &s) < 0) {
        printf("rank 0: vmtrack's shared cache is not in this process%s\n",
               o->expect == EXPECT_RCACHE ? " (FAIL: it was expected)" : "");
        return o->expect == EXPECT_RCACHE;
    }
    printf("rank 0: vmt_shared (tracker %s): %llu registrations, %llu hits, %llu invalidations\n",
           tracker(c), (unsigned long long)s.registrations, (unsigned long long)s.hits,
           (unsigned long long)s.invalidations);
    if (o->expect == EXPECT_RCACHE && s.registrations < fresh) {
        printf("rank 0: FAIL: expected at least %llu registrations by vmtrack (zero-copy)\n",
               fresh);
        return 1;
    }
    return 0;
}

static int parse(int argc, char **argv, struct options *o)
{
    *o = (struct options){.rounds = 21, .len = 1u << 20, .kinds = N_CHANGES};
    for (int i = 1; i < argc; i++) {
        const char *v = i + 1 < argc ? argv[i + 1] : "";
        if (!strcmp(argv[i], "--rounds") && *v)
            o->rounds = atoi(argv[++i]);
        else if (!strcmp(argv[i], "--kib") && *v)
            o->len = (size_t)atol(argv[++i]) << 10;
        else if (!strcmp(argv[i], "--changes") && (!strcmp(v, "all") || !strcmp(v, "libc")))
            o->kinds = !strcmp(argv[++i], "all") ? N_CHANGES : RAW_REMAP;
        else if (!strcmp(argv[i], "--expect") && !strcmp(v, "none"))
            o->expect = EXPECT_NONE, i++;
        else if (!strcmp(argv[i], "--expect") && !strcmp(v, "monitor"))
            o->expect = EXPECT_MONITOR, i++;
        else if (!strcmp(argv[i], "--expect") && !strcmp(v, "rcache"))
            o->expect = EXPECT_RCACHE, i++;
        else
            return -1;
    }
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
            fprintf(stderr, "usage: mpirun -np 2 mpi_ofi_stale [--rounds N] [--kib K] "
                            "[--changes all|libc] [--expect none|monitor|rcache]\n");
        MPI_Finalize();
        return 2;
    }
    int ret = rank == 0 ? run_sender(&o) : run_receiver(&o);
    if (ret == 0 && rank == 0) {
        unsigned long long fresh = 1;   /* the first pages, then one set per change */
        for (int r = 1; r < o.rounds; r++)
            fresh += change_before(o.kinds, r) != KEEP;
        ret = monitor_report(&o, fresh) | rcache_report(&o, fresh);
    }
    int worst = 0;
    MPI_Allreduce(&ret, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    MPI_Finalize();
    return worst;
}
