/* MPI Sessions on vmtrack (mpirun -np 2 --tune <vmtrack's settings file>, Open MPI 5): three
 * cycles of MPI_Session_init, a communicator from "mpi://WORLD", messages, MPI_Session_finalize,
 * in one process. Each cycle opens and closes the rcache framework (the component is loaded,
 * takes over and is unloaded again), while libc's entries must stay with libvmtrack, which
 * stays loaded. Each cycle checks: every entry Open MPI's patcher would patch jumps into
 * libvmtrack (during the session and after it ended), a 4 MiB message whose buffer was
 * unmapped and mapped again arrives intact, an Allreduce sums the ranks.
 * Exit status: 0 all right, 1 a check failed, 77 no MPI Sessions (Open MPI 4.1). */
#include <dlfcn.h>
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include <mpi.h>

#include "ompi-rcache/entry_owner.h"

#define MSG_BYTES (4u << 20)
#define CYCLES 3

/* Open MPI 5 has Sessions but still says MPI 3.1 */
#if MPI_VERSION >= 4 || (defined(OMPI_MAJOR_VERSION) && OMPI_MAJOR_VERSION >= 5)
static int failures;

static void check_entries(int rank, int cycle, const char *when)
{
    static const char *const fns[] = {"mmap", "munmap", "mremap", "madvise", "brk", "shmat",
                                      "shmdt"};
    void *libc = dlopen("libc.so.6", RTLD_NOW | RTLD_NOLOAD);
    for (size_t i = 0; libc && i < sizeof(fns) / sizeof(fns[0]); i++) {
        const char *owner = vmt_ompi_entry_owner(dlsym(libc, fns[i]));
        if (!strstr(owner, "libvmtrack")) {
            fprintf(stderr, "rank %d: FAIL: cycle %d, %s: %s() jumps to %s\n", rank, cycle,
                    when, fns[i], owner);
            failures++;
        }
    }
    if (!libc) {
        fprintf(stderr, "rank %d: FAIL: libc.so.6 not found\n", rank);
        failures++;
    } else {
        dlclose(libc);
    }
}

/* rank 0 sends 4 MiB from a buffer mapped anew, rank 1 checks every byte: bad bytes */
static size_t exchange(MPI_Comm comm, int rank, int cycle)
{
    unsigned char *buf = mmap(NULL, MSG_BYTES, PROT_READ | PROT_WRITE,
                              MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (MAP_FAILED == buf)
        return MSG_BYTES;
    size_t bad = 0;
    for (int round = 0; round < 2; round++) {
        unsigned char v = (unsigned char) (cycle * 16 + round + 1);
        if (0 == rank) {
            memset(buf, v, MSG_BYTES);
            MPI_Send(buf, MSG_BYTES, MPI_BYTE, 1, round, comm);
            munmap(buf, MSG_BYTES);   /* new pages at (likely) the same address */
            buf = mmap(buf, MSG_BYTES, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS,
                       -1, 0);
        } else if (1 == rank) {
            MPI_Recv(buf, MSG_BYTES, MPI_BYTE, 0, round, comm, MPI_STATUS_IGNORE);
            for (size_t i = 0; i < MSG_BYTES; i++)
                bad += buf[i] != v;
        }
    }
    if (MAP_FAILED != buf)
        munmap(buf, MSG_BYTES);
    return bad;
}

static int cycle_once(int cycle)
{
    MPI_Session session;
    MPI_Group group;
    MPI_Comm comm;
    if (MPI_SUCCESS != MPI_Session_init(MPI_INFO_NULL, MPI_ERRORS_RETURN, &session) ||
        MPI_SUCCESS != MPI_Group_from_session_pset(session, "mpi://WORLD", &group) ||
        MPI_SUCCESS != MPI_Comm_create_from_group(group, "vmtrack.sessions", MPI_INFO_NULL,
                                                  MPI_ERRORS_RETURN, &comm)) {
        fprintf(stderr, "FAIL: cycle %d: a session or its communicator could not be made\n",
                cycle);
        return -1;
    }
    int rank, size, one = 1, sum = 0;
    MPI_Comm_rank(comm, &rank);
    MPI_Comm_size(comm, &size);
    check_entries(rank, cycle, "in the session");
    size_t bad = size >= 2 ? exchange(comm, rank, cycle) : 0;
    MPI_Allreduce(&one, &sum, 1, MPI_INT, MPI_SUM, comm);
    if (bad || sum != size) {
        fprintf(stderr, "rank %d: FAIL: cycle %d: %zu bad bytes, Allreduce %d of %d\n", rank,
                cycle, bad, sum, size);
        failures++;
    }
    MPI_Comm_free(&comm);
    MPI_Group_free(&group);
    MPI_Session_finalize(&session);
    check_entries(rank, cycle, "after MPI_Session_finalize");
    printf("rank %d: cycle %d: %zu bad bytes, Allreduce %d of %d\n", rank, cycle, bad, sum, size);
    return rank;
}

int main(void)
{
    int rank = 0;
    for (int cycle = 0; cycle < CYCLES; cycle++) {
        rank = cycle_once(cycle);
        if (rank < 0)
            return 1;
    }
    printf("rank %d: %d session cycles, %s\n", rank, CYCLES, failures ? "FAILED" : "all right");
    return failures ? 1 : 0;
}
#else
int main(void)
{
    printf("SKIP: this MPI has no Sessions (MPI 4, Open MPI 5)\n");
    return 77;
}
#endif
