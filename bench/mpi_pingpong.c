/* MPI ping-pong between 2 ranks: latency (half a round trip) and bandwidth per message size,
 * the same buffers every iteration (what a registration cache serves: with mpi_leave_pinned
 * the second use of a buffer is a cache hit). Plain MPI: the rcache in use is chosen on the
 * mpirun line (bench/ompi_pingpong.sh runs grdma and vmtrack jobs one after the other).
 * Prints one line per size from rank 0:
 *   size <bytes> iters <n> lat_us <half round trip> bw_MBps <bytes/s / 1e6 one way>
 * Usage: mpirun -np 2 mpi_pingpong [max_bytes [scale]]   (scale multiplies the iterations) */
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <mpi.h>

static const size_t sizes[] = {8, 64, 512, 4096, 65536, 262144, 1048576, 4194304};

/* Fewer iterations for large messages: each size takes about the same time. */
static int iterations(size_t size, double scale)
{
    int n = size <= 4096 ? 2000 : size <= 65536 ? 500 : size <= 1048576 ? 100 : 30;
    n = (int)(n * scale);
    return n < 4 ? 4 : n;
}

static double pingpong(int rank, char *buf, size_t size, int iters)
{
    int peer = 1 - rank;
    MPI_Barrier(MPI_COMM_WORLD);
    double t0 = MPI_Wtime();
    for (int i = 0; i < iters; i++) {
        if (rank == 0) {
            MPI_Send(buf, (int)size, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
            MPI_Recv(buf, (int)size, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
        } else {
            MPI_Recv(buf, (int)size, MPI_BYTE, peer, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            MPI_Send(buf, (int)size, MPI_BYTE, peer, 0, MPI_COMM_WORLD);
        }
    }
    return MPI_Wtime() - t0;
}

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, nranks;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &nranks);
    size_t max = argc > 1 ? strtoull(argv[1], NULL, 0) : 4194304;
    double scale = argc > 2 ? atof(argv[2]) : 1.0;
    if (nranks != 2 || max < 8 || max > sizes[sizeof(sizes) / sizeof(sizes[0]) - 1] ||
        !(scale > 0)) {
        if (rank == 0)
            fprintf(stderr, "usage: mpirun -np 2 mpi_pingpong [max_bytes (8..4194304) [scale]]\n");
        MPI_Finalize();
        return 2;
    }
    char *buf = malloc(max);
    if (!buf)
        MPI_Abort(MPI_COMM_WORLD, 2);
    memset(buf, rank + 1, max);
    for (size_t k = 0; k < sizeof(sizes) / sizeof(sizes[0]) && sizes[k] <= max; k++) {
        int iters = iterations(sizes[k], scale);
        pingpong(rank, buf, sizes[k], iters / 10 + 1);   /* warm-up: connections, first registration */
        double t = pingpong(rank, buf, sizes[k], iters);
        if (rank == 0)
            printf("size %zu iters %d lat_us %.3f bw_MBps %.4f\n", sizes[k], iters,
                   t / iters / 2 * 1e6, (double)sizes[k] * iters * 2 / t / 1e6);
    }
    free(buf);
    MPI_Finalize();
    return 0;
}
