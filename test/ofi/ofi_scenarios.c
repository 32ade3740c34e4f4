/* The data-checked scenarios over RDMA: a source buffer is written into the target four
 * times, each round with different bytes. Rounds 1-3 register the same pages (a miss; with
 * vmtrack's monitor a second miss where its change log cannot vouch for the range, as a range
 * is cached then only under a watch armed before its registration, doc/ofi.md; then a hit in
 * libfabric's MR cache), then
 * the address space
 * changes under the buffer and new pages come back at the same address, round 4 writes new
 * bytes: the target must get them. If it gets round 3's bytes, libfabric used a stale
 * registration (the old, pinned pages). */
#define _GNU_SOURCE
#include <errno.h>
#include <malloc.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <rdma/fi_errno.h>

#include "ofi_rig.h"
#include "ofi_suite.h"

#define LEN OFI_SCN_LEN
#define ROUNDS_BEFORE 3

const struct ofi_scn ofi_scns[] = {
    {"munmap-mmap", "munmap, then mmap again at the address"},
    {"free-malloc", "free a large block (glibc unmaps it), malloc it again"},
    {"mremap-mmap", "mremap the pages away, then mmap again at the address"},
    {"madv-dontneed", "madvise(MADV_DONTNEED): fresh zero pages at the same address"},
    {"mmap-fixed", "mmap(MAP_FIXED) new pages over the buffer"},
    {"raw-syscall-munmap", "syscall(SYS_munmap) bypassing libc, then mmap again"},
};
const unsigned ofi_scn_count = sizeof(ofi_scns) / sizeof(ofi_scns[0]);

static void *map_at(void *hint)
{
    void *p = mmap(hint, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    return p == MAP_FAILED ? NULL : p;
}

/* Change the address space under buf; returns the buffer's address afterwards (NULL: lost). */
static void *change(const char *s, void *buf)
{
    if (!strcmp(s, "munmap-mmap")) {
        munmap(buf, LEN);
        return map_at(buf);
    }
    if (!strcmp(s, "free-malloc")) {
        free(buf);
        return malloc(LEN);
    }
    if (!strcmp(s, "mremap-mmap")) {
        /* The target is reserved first: MREMAP_FIXED unmaps whatever is there (a guessed
         * address once took part of libstdc++'s text, and the process died at exit). */
        void *dst = mmap(NULL, LEN, PROT_NONE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
        if (dst == MAP_FAILED)
            return NULL;
        void *away = mremap(buf, LEN, LEN, MREMAP_MAYMOVE | MREMAP_FIXED, dst);
        if (away == MAP_FAILED) {
            munmap(dst, LEN);
            return NULL;
        }
        void *back = map_at(buf);
        munmap(away, LEN);
        return back;
    }
    if (!strcmp(s, "madv-dontneed"))
        return madvise(buf, LEN, MADV_DONTNEED) == 0 ? buf : NULL;
    if (!strcmp(s, "mmap-fixed")) {
        void *p = mmap(buf, LEN, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED,
                       -1, 0);
        return p == MAP_FAILED ? NULL : p;
    }
    if (!strcmp(s, "raw-syscall-munmap")) {
        syscall(SYS_munmap, buf, LEN);
        return map_at(buf);
    }
    return NULL;
}

static void result(const char *s, const char *res, const char *detail)
{
    printf("RESULT scenario %s %s %s\n", s, res, detail);
    fflush(stdout);
}

/* One scenario on the open rig: 0, or 1 when something failed that is not staleness. */
int ofi_scenario_run(struct ofi_rig *rp, const char *s)
{
    struct ofi_rig *r = rp;
    char why[256];
    int ret;
    void *buf;
    if (!strcmp(s, "free-malloc")) {
        mallopt(M_MMAP_THRESHOLD, 128 << 10);   /* fixed: free() of LEN unmaps */
        buf = malloc(LEN);
    } else {
        buf = map_at(NULL);
    }
    int code = 0;
    for (unsigned round = 1; round <= ROUNDS_BEFORE; round++) {
        rig_fill(buf, LEN, round);
        if ((ret = rig_put(r, buf, LEN)) || !rig_holds(r->target, LEN, round)) {
            snprintf(why, sizeof(why), "round %u (before any change): %s", round,
                     ret ? fi_strerror(-ret) : "wrong bytes");
            result(s, "error", why);
            code = 1;
            goto out;
        }
    }
    void *now = change(s, buf);
    if (now != buf) {
        snprintf(why, sizeof(why), "the address did not come back (%p, not %p)", now, buf);
        result(s, "n/a", why);
        goto out;
    }
    rig_fill(buf, LEN, ROUNDS_BEFORE + 1);
    ret = rig_put(r, buf, LEN);
    if (ret) {
        snprintf(why, sizeof(why), "round %u: %s", ROUNDS_BEFORE + 1, fi_strerror(-ret));
        result(s, "error", why);
        code = 1;
    } else if (rig_holds(r->target, LEN, ROUNDS_BEFORE + 1)) {
        result(s, "caught", "the new bytes arrived");
    } else if (rig_holds(r->target, LEN, ROUNDS_BEFORE)) {
        result(s, "STALE", "the previous round's bytes arrived: the old pages were still "
               "registered");
    } else {
        result(s, "error", "neither the previous round's nor the new bytes arrived");
        code = 1;
    }
out:
    return code;
}
