/* The "ucx-rcache" scenario provider: UCX 1.13's own registration cache (ucs_rcache) with
 * io_uring fixed-buffer registrations. mem_reg puts the region into a free slot of a sparse
 * fixed-buffer table (io_uring_register_buffers_sparse + io_uring_register_buffers_update_tag,
 * through scn_ring_slot_reg) and keeps the slot in the region struct; mem_dereg empties it.
 *
 * Variants: "ucx" - UCX's own memory hooks (libvmtrack-ucx must not be active);
 *           "vmtrack:<tracker>" - libvmtrack-ucx is loaded and feeds UCX from <tracker>. */
#define _GNU_SOURCE
#include <dlfcn.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>

#include "provider_ucx.h"
#include "ucx_rcache_params.h"

struct ucx_region {
    ucs_rcache_region_t super;
    int slot;                     /* fixed-buffer index of this registration */
};

struct ucx_ctx {
    ucs_rcache_t *rcache;
    struct scn_ring_table *table;
};

static ucs_status_t ucx_mem_reg(void *context, ucs_rcache_t *rcache, void *arg,
                                ucs_rcache_region_t *region, uint16_t flags)
{
    struct ucx_ctx *c = context;
    struct ucx_region *r = (struct ucx_region *)region;
    int ret;
    (void)rcache; (void)arg; (void)flags;

    ret = scn_ring_slot_reg(c->table, (void *)region->super.start,
                            region->super.end - region->super.start, &r->slot);
    if (ret < 0) {
        r->slot = -1;
        return ret == -ENOSPC ? UCS_ERR_EXCEEDS_LIMIT : UCS_ERR_IO_ERROR;
    }
    return UCS_OK;
}

static void ucx_mem_dereg(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *region)
{
    struct ucx_ctx *c = context;
    struct ucx_region *r = (struct ucx_region *)region;
    (void)rcache;
    if (r->slot >= 0)
        scn_ring_slot_dereg(c->table, r->slot);
    r->slot = -1;
}

static const ucs_rcache_ops_t ucx_ops = {
    .mem_reg = ucx_mem_reg,
    .mem_dereg = ucx_mem_dereg,
};

int ucx_module_state(char *tracker, size_t tlen, char *why, size_t wlen)
{
    int (*mode)(char *, size_t) = (int (*)(char *, size_t))dlsym(RTLD_DEFAULT, "vmt_ucx_mode");
    const char *(*trk)(void) = (const char *(*)(void))dlsym(RTLD_DEFAULT, "vmt_ucx_tracker");
    if (!mode || !trk) {
        snprintf(tracker, tlen, "none");
        snprintf(why, wlen, "libvmtrack-ucx is not loaded");
        return -1;
    }
    int m = mode(why, wlen);
    snprintf(tracker, tlen, "%s", trk());
    return m;
}

static int ucx_setup(void **ctx, struct io_uring *ring, const char *variant, char *why,
                     size_t whylen)
{
    char tracker[32], mwhy[256];
    int mode = ucx_module_state(tracker, sizeof(tracker), mwhy, sizeof(mwhy));
    const char *want = variant ? variant : "ucx";

    if (!strcmp(want, "ucx")) {
        if (mode > 0) {
            snprintf(why, whylen, "libvmtrack-ucx is active (%s): not UCX's own hooks", tracker);
            return -ENOTSUP;
        }
    } else if (!strncmp(want, "vmtrack:", 8)) {
        if (mode <= 0) {
            snprintf(why, whylen, "libvmtrack-ucx is off: %s", mwhy);
            return -ENOTSUP;
        }
        if (strcmp(want + 8, tracker)) {
            snprintf(why, whylen, "libvmtrack-ucx uses tracker %s, not %s", tracker, want + 8);
            return -ENOTSUP;
        }
    } else {
        snprintf(why, whylen, "unknown variant \"%s\" (ucx, vmtrack:<tracker>)", want);
        return -EINVAL;
    }

    struct ucx_ctx *c = calloc(1, sizeof(*c));
    if (!c) {
        snprintf(why, whylen, "out of memory");
        return -ENOMEM;
    }
    int ret = scn_ring_table_create(ring, 1024, &c->table);
    if (ret < 0) {
        snprintf(why, whylen, "fixed-buffer table: %s", strerror(-ret));
        free(c);
        return ret == -EINVAL || ret == -ENOSYS ? -ENOTSUP : ret;
    }

    ucs_rcache_params_t p = ucx_test_rcache_params(sizeof(struct ucx_region),
                                                   (size_t)sysconf(_SC_PAGESIZE), &ucx_ops, c);
    p.max_regions = 1000;
    ucs_status_t st = ucs_rcache_create(&p, "scenario", NULL, &c->rcache);
    if (st != UCS_OK) {
        snprintf(why, whylen, "ucs_rcache_create: %s", ucs_status_string(st));
        scn_ring_table_destroy(c->table);
        free(c);
        return -EIO;
    }
    *ctx = c;
    return 0;
}

static int ucx_get(void *ctx, void *addr, size_t len, int *fixed_index, void **token)
{
    struct ucx_ctx *c = ctx;
    ucs_rcache_region_t *r;
    ucs_status_t st = ucs_rcache_get(c->rcache, addr, len, PROT_READ, NULL, &r);
    if (st != UCS_OK)
        return st == UCS_ERR_NO_MEMORY ? -ENOMEM : st == UCS_ERR_EXCEEDS_LIMIT ? -ENOSPC : -EFAULT;
    *fixed_index = ((struct ucx_region *)r)->slot;
    *token = r;
    return 0;
}

static void ucx_put(void *ctx, void *token)
{
    struct ucx_ctx *c = ctx;
    ucs_rcache_region_put(c->rcache, token);
}

static void ucx_teardown(void *ctx)
{
    struct ucx_ctx *c = ctx;
    if (!c)
        return;
    ucs_rcache_destroy(c->rcache);
    scn_ring_table_destroy(c->table);
    free(c);
}

const struct scn_provider scn_provider_ucx = {
    .name = "ucx-rcache",
    .setup = ucx_setup,
    .get = ucx_get,
    .put = ucx_put,
    .teardown = ucx_teardown,
    .fork_child = NULL,
};
