/* A buffer used twice, as fi_mr_cache_evict-style code and every application that sends from
 * the same buffer again do: in a domain of its own (its own MR cache, so libfabric's "MR cache
 * stats" line at its close counts only this), `n` buffers are mapped, then each is registered
 * and RDMA-written twice, bytes checked at the target. A monitor that lets libfabric cache a
 * range's first registration gives n hits; one that only arms it (doc/ofi.md) gives none.
 * The buffers stay mapped until the end: a buffer mapped where another was unmapped since the
 * thread's last call into vmtrack's monitor is registered twice (the change log cannot tell
 * that unmap from one after the pin). */
#define _GNU_SOURCE
#include <stdio.h>
#include <string.h>
#include <sys/mman.h>

#include <rdma/fi_errno.h>

#include "ofi_rig.h"
#include "ofi_suite.h"

#define REUSE_LEN (64u << 10)

int ofi_reuse_run(unsigned n)
{
    struct ofi_rig r;
    char why[256];
    unsigned puts = 0;
    int bad = 0;

    printf("RESULT reuse-begin\n");
    fflush(stdout);
    if (rig_open(&r, REUSE_LEN, why, sizeof(why))) {
        printf("RESULT reuse error %s\n", why);
        return 1;
    }
    char *bufs = mmap(NULL, (size_t)n * REUSE_LEN, PROT_READ | PROT_WRITE,
                      MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (bufs == MAP_FAILED)
        bad = 1;
    for (unsigned i = 0; i < n && !bad; i++) {
        char *buf = bufs + (size_t)i * REUSE_LEN;
        for (unsigned use = 1; use <= 2 && !bad; use++) {
            unsigned round = 2 * i + use;
            rig_fill(buf, REUSE_LEN, round);
            if (rig_put(&r, buf, REUSE_LEN) || !rig_holds(r.target, REUSE_LEN, round))
                bad = 1;
            else
                puts++;
        }
    }
    rig_close(&r);   /* libfabric logs this domain's "MR cache stats" here */
    if (bufs != MAP_FAILED)
        munmap(bufs, (size_t)n * REUSE_LEN);
    printf("RESULT reuse buffers %u puts %u%s\n", n, puts, bad ? " error" : "");
    fflush(stdout);
    return bad;
}
