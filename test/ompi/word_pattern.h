/* The words the Open MPI RDMA tests write and check: a pattern that names its round (seed)
 * and each word's place, so that a stale page, a shifted copy or another round's data all
 * read as wrong words. */
#ifndef VMTRACK_TEST_OMPI_WORD_PATTERN_H
#define VMTRACK_TEST_OMPI_WORD_PATTERN_H

#include <stddef.h>
#include <stdint.h>

static inline uint64_t pattern_word(size_t i, uint64_t seed)
{
    return (seed << 40) ^ (i * 0x9E3779B97F4A7C15ull);
}

static inline void fill(uint64_t *p, size_t n, uint64_t seed)
{
    for (size_t i = 0; i < n; i++)
        p[i] = pattern_word(i, seed);
}

/* How many of the n words are not round seed's. */
static inline size_t bad_words(const uint64_t *p, size_t n, uint64_t seed)
{
    size_t bad = 0;
    for (size_t i = 0; i < n; i++)
        bad += p[i] != pattern_word(i, seed);
    return bad;
}

#endif
