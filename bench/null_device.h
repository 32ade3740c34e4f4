/* A device that registers nothing, for programs that time or load the cache itself (the
 * bench, and the tests that load the library or time a tracker): its handle is the range's
 * address, and deregistering it does nothing. C and C++ alike. */
#ifndef VMTRACK_BENCH_NULL_DEVICE_H
#define VMTRACK_BENCH_NULL_DEVICE_H

#include <stddef.h>

static inline int null_reg(void *ctx, void *addr, size_t len, unsigned access, void **handle)
{
    (void)ctx;
    (void)len;
    (void)access;
    *handle = addr;
    return 0;
}

static inline void null_dereg(void *ctx, void *handle)
{
    (void)ctx;
    (void)handle;
}

#endif
