/* What a large MPI send costs over UCX, and how many registrations UCT made for it: a 2-rank
 * MPICH job (ch4:ucx) for the guest rig, run once on stock UCX and once with libvmtrack-ucx
 * preloaded by test/ucx/mpich_rxe.sh, which prints the ratios.
 *
 * Rank 0 sends one buffer per size (64 KiB to 4 MiB) to rank 1, `--iters` times after a few
 * untimed sends, and prints one line per size:
 *   cost SIZE US_PER_SEND REGS_PER_SEND
 * where REGS_PER_SEND is UCT's registrations of the buffer per send as libvmtrack-ucx counts
 * them (vmt_ucx_witness), or -1 on stock UCX (no module to count). The buffer stays the same:
 * this is the cost of a send whose pages did not change, the case a registration cache is for.
 *
 * Usage: mpich_send_cost [--iters N] */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <mpi.h>

#include "vmtrack_ucx.h"

#define WARMUP 3

static int sender(size_t len, int iters)
{
    int (*witness)(const void *, size_t) =
        (int (*)(const void *, size_t))dlsym(RTLD_DEFAULT, "vmt_ucx_witness");
    int (*stats)(struct vmt_ucx_stats *) =
        (int (*)(struct vmt_ucx_stats *))dlsym(RTLD_DEFAULT, "vmt_ucx_stats_get");
    unsigned char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                              -1, 0);
    struct vmt_ucx_stats s = {.sz = sizeof(s)};

    if (buf == MAP_FAILED)
        return 2;
    memset(buf, 7, len);
    for (int i = 0; i < WARMUP; i++)
        MPI_Send(buf, (int)len, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
    MPI_Recv(NULL, 0, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    if (witness)
        witness(buf, len);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++)
        MPI_Send(buf, (int)len, MPI_BYTE, 1, 0, MPI_COMM_WORLD);
    MPI_Recv(NULL, 0, MPI_BYTE, 1, 1, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    double us = (MPI_Wtime() - t0) * 1e6 / iters;
    double regs = -1;
    if (witness && stats && stats(&s) == 0)
        regs = (double)s.witness_registrations / iters;
    printf("cost %zu %.1f %.2f\n", len, us, regs);
    munmap(buf, len);
    return 0;
}

static int receiver(size_t len, int iters)
{
    unsigned char *buf = malloc(len);
    if (!buf)
        return 2;
    for (int i = 0; i < WARMUP; i++)
        MPI_Recv(buf, (int)len, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(NULL, 0, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
    for (int i = 0; i < iters; i++)
        MPI_Recv(buf, (int)len, MPI_BYTE, 0, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    MPI_Send(NULL, 0, MPI_BYTE, 0, 1, MPI_COMM_WORLD);
    free(buf);
    return 0;
}

int main(int argc, char **argv)
{
    int rank, size, iters = 20, ret = 0, worst = 0;

    setvbuf(stdout, NULL, _IOLBF, 0);
    MPI_Init(&argc, &argv);
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (argc == 3 && !strcmp(argv[1], "--iters"))
        iters = atoi(argv[2]);
    if (size != 2 || iters < 1 || (argc != 1 && argc != 3)) {
        if (rank == 0)
            fprintf(stderr, "usage: mpiexec -n 2 mpich_send_cost [--iters N]\n");
        MPI_Finalize();
        return 2;
    }
    for (size_t len = 64u << 10; len <= (4u << 20) && ret == 0; len <<= 2)
        ret = rank == 0 ? sender(len, iters) : receiver(len, iters);
    MPI_Allreduce(&ret, &worst, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    if (rank == 0)
        printf("mpich_send_cost: verdict: %s\n", worst ? "fail" : "pass");
    MPI_Finalize();
    return worst;
}
