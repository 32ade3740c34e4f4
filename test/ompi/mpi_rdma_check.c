/* An MPI job (mpirun -np 2) that moves large messages through a registering BTL (openib over
 * soft-RoCE in the guest rig) and checks every byte, while the buffers are unmapped and mapped
 * again at the same address between rounds: a registration cache that missed the change would
 * let the BTL move the old pages, and the receiver would see old bytes.
 *
 * At the end each rank checks that vmtrack's shared cache did the registering (registrations
 * and hits > 0) unless VMT_EXPECT_VMTRACK=0, and prints its counts.
 * Exit status: 0 all bytes right, 1 wrong bytes or vmtrack unused, 2 setup error. */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <mpi.h>

#include "vmtrack.h"
#include "word_pattern.h"

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (size != 2) {
        if (0 == rank)
            fprintf(stderr, "run with -np 2\n");
        MPI_Finalize();
        return 2;
    }
    const size_t len = 4u << 20;            /* well above openib's eager/RDMA thresholds */
    const size_t words = len / sizeof(uint64_t);
    const int rounds = argc > 1 ? atoi(argv[1]) : 24;
    uint64_t *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (MAP_FAILED == buf)
        MPI_Abort(MPI_COMM_WORLD, 2);

    size_t bad = 0;
    int remaps = 0;
    for (int r = 0; r < rounds; r++) {
        if (r > 0 && 0 == r % 3) {
            /* new pages at the same address: the old registration must not be used */
            munmap(buf, len);
            void *again = mmap(buf, len, PROT_READ | PROT_WRITE,
                               MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0);
            if (again != buf) {
                fprintf(stderr, "rank %d: could not map the same address again\n", rank);
                MPI_Abort(MPI_COMM_WORLD, 2);
            }
            remaps++;
        }
        uint64_t seed = (uint64_t) r * 2 + 1;
        if (0 == rank) {
            fill(buf, words, seed);
            MPI_Send(buf, (int) len, MPI_BYTE, 1, r, MPI_COMM_WORLD);
            memset(buf, 0, len);
            MPI_Recv(buf, (int) len, MPI_BYTE, 1, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            bad += bad_words(buf, words, seed + 1);
        } else {
            memset(buf, 0xee, len);
            MPI_Recv(buf, (int) len, MPI_BYTE, 0, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            bad += bad_words(buf, words, seed);
            fill(buf, words, seed + 1);
            MPI_Send(buf, (int) len, MPI_BYTE, 0, r, MPI_COMM_WORLD);
        }
    }

    struct vmt_stats s = {.sz = sizeof(s)};
    const char *tracker = "-";
    struct vmt_cache *c = vmt_shared();
    if (c) {
        vmt_stats_get(c, &s);
        tracker = vmt_cache_tracker(c);
    }
    const char *expect = getenv("VMT_EXPECT_VMTRACK");
    int want_vmtrack = !(expect && 0 == strcmp(expect, "0"));
    int unused = want_vmtrack && (0 == s.registrations || 0 == s.hits);
    printf("rank %d: %d rounds of %zu MiB each way, %d remaps, %zu wrong words; vmtrack (%s): "
           "registrations %llu hits %llu misses %llu invalidations %llu%s\n",
           rank, rounds, len >> 20, remaps, bad, tracker,
           (unsigned long long) s.registrations, (unsigned long long) s.hits,
           (unsigned long long) s.misses, (unsigned long long) s.invalidations,
           unused ? "  <- vmtrack was not used" : "");
    fflush(stdout);
    int mine = (bad || unused) ? 1 : 0, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    munmap(buf, len);
    MPI_Finalize();
    return any;
}
