/* The rounds of the 2-rank stale-page jobs (test/ucx/mpich_stale.c, test/ompi/mpi_ofi_stale.c):
 * before each round but the first, rank 0 gives its send buffer new pages at the same address
 * in one of five ways, fills it with the round's pattern and sends it; rank 1 sorts every byte
 * it receives that is not the round's into stale (an earlier round's: the pages the buffer had
 * before) or other. Plain C, header only: the jobs build against different MPIs. */
#ifndef VMTRACK_TEST_STALE_ROUNDS_H
#define VMTRACK_TEST_STALE_ROUNDS_H

#include <stddef.h>
#include <stdio.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

enum change {
    KEEP,            /* refill in place: the cached registration is still right */
    LIBC_REMAP,      /* munmap + mmap at the same address through libc */
    LIBC_FIXED,      /* mmap MAP_FIXED over the buffer through libc */
    RAW_REMAP,       /* syscall(SYS_munmap) + syscall(SYS_mmap) at the same address */
    RAW_FIXED,       /* syscall(SYS_mmap, MAP_FIXED) over the buffer */
    N_CHANGES
};

/* The names the jobs' scripts grep for ("raw munmap+mmap ... N stale bytes"). */
static inline const char *change_name(enum change how)
{
    static const char *const names[N_CHANGES] = {
        "keep", "libc munmap+mmap", "libc mmap MAP_FIXED", "raw munmap+mmap", "raw mmap MAP_FIXED",
    };
    return (unsigned)how < N_CHANGES ? names[how] : "?";
}

/* The change made before a round, of the first `kinds` (round 0: none). */
static inline enum change change_before(int kinds, int round)
{
    return round == 0 ? KEEP : (enum change)((round - 1) % kinds);
}

static inline unsigned char round_pattern(int round, size_t i)
{
    /* 53 is odd, so a byte and its index name the round it was written in (mod 256) */
    return (unsigned char)(round * 53 + (int)(i % 251) + 1);
}

/* The round (mod 256) whose pattern has this byte at index i. */
static inline int round_of(unsigned char byte, size_t i)
{
    return (int)((unsigned char)((byte - (int)(i % 251) - 1) * 29));   /* 29 * 53 = 1 mod 256 */
}

static inline void fill_round(unsigned char *p, size_t len, int round)
{
    for (size_t i = 0; i < len; i++)
        p[i] = round_pattern(round, i);
}

/* New pages at the same address; the old ones stay pinned by any registration of them.
 * 0, or -1 with a message. */
static inline int replace_pages(unsigned char *buf, size_t len, enum change how)
{
    const int prot = PROT_READ | PROT_WRITE, flags = MAP_PRIVATE | MAP_ANONYMOUS;
    void *got = buf;
    switch (how) {
    case KEEP:
        return 0;
    case LIBC_REMAP:
        munmap(buf, len);
        got = mmap(buf, len, prot, flags, -1, 0);
        break;
    case LIBC_FIXED:
        got = mmap(buf, len, prot, flags | MAP_FIXED, -1, 0);
        break;
    case RAW_REMAP:
        syscall(SYS_munmap, buf, len);
        got = (void *)syscall(SYS_mmap, buf, len, prot, flags, -1, 0);
        break;
    case RAW_FIXED:
        got = (void *)syscall(SYS_mmap, buf, len, prot, flags | MAP_FIXED, -1, 0);
        break;
    default:
        return -1;
    }
    if (got != buf) {
        fprintf(stderr, "rank 0: %s did not map the same address again\n", change_name(how));
        return -1;
    }
    return 0;
}

/* Rank 1's count per kind of change made before the rounds. */
struct stale_tally {
    unsigned long long stale[N_CHANGES], wrong[N_CHANGES];
    unsigned rounds[N_CHANGES];
};

/* Sorts round `round`'s received bytes into the tally; says so when some are not the round's. */
static inline void tally_round(struct stale_tally *t, enum change how, const unsigned char *got,
                               size_t len, int round)
{
    unsigned long long stale = 0, wrong = 0;
    for (size_t i = 0; i < len; i++) {
        if (got[i] == round_pattern(round, i))
            continue;
        if (round_of(got[i], i) < round)   /* a byte of pages this buffer had earlier */
            stale++;
        else
            wrong++;
    }
    t->stale[how] += stale;
    t->wrong[how] += wrong;
    t->rounds[how]++;
    if (stale || wrong)
        printf("rank 1: round %d (%s): %llu stale bytes, %llu other wrong bytes of %zu\n", round,
               change_name(how), stale, wrong, len);
}

/* Prints the tally of the first `kinds` changes; 1 if any byte was not its round's. */
static inline int print_tally(const struct stale_tally *t, int kinds)
{
    int bad = 0;
    for (int c = 0; c < kinds; c++) {
        printf("rank 1: %-20s %2u rounds: %llu stale bytes, %llu other wrong bytes\n",
               change_name((enum change)c), t->rounds[c], t->stale[c], t->wrong[c]);
        bad |= t->stale[c] != 0 || t->wrong[c] != 0;
    }
    return bad;
}

#endif
