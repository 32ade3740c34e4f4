/* The scenario provider for vmtrack itself: a cache with the tracker named by the variant, and
 * the io_uring device on the scenario's ring. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <vmtrack.h>
#include <vmtrack/iouring.h>

#include "scenario.h"

struct vprov {
    struct vmt_cache *cache;
    struct vmt_device *dev;
    int own_cache;
};

/* Errors of vmt_cache_create that mean "this tracker cannot be used here". */
static int tracker_unavailable(int ret)
{
    /* -EBUSY: another patcher (UCX's ucm, Open MPI's) owns an entry the hooks would patch. */
    return ret == -ENOTSUP || ret == -ENODEV || ret == -ENOSYS || ret == -EPERM ||
           ret == -EACCES || ret == -ENOENT || ret == -EBUSY;
}

/* The core says why a tracker cannot be used in the report of an "auto" cache: one line
 * "name: reason" per tracker. Use that line when there is one. */
static void explain_unavailable(const char *tracker, char *why, size_t whylen)
{
    struct vmt_cache_opts o;
    memset(&o, 0, sizeof(o));
    o.sz = sizeof(o);
    o.tracker = "auto";
    struct vmt_cache *c;
    if (vmt_cache_create(&o, &c) < 0)
        return;
    char rep[2048];
    vmt_cache_tracker_report(c, rep, sizeof(rep));
    vmt_cache_destroy(c);
    size_t n = strlen(tracker);
    for (char *line = rep; line && *line;) {
        char *nl = strchr(line, '\n');
        if (nl)
            *nl = 0;
        if (!strncmp(line, tracker, n) && line[n] == ':') {
            const char *r = line + n + 1;
            while (*r == ' ')
                r++;
            if (!strncmp(r, "unavailable: ", 13))
                r += 13;
            snprintf(why, whylen, "%s", r);
            return;
        }
        line = nl ? nl + 1 : NULL;
    }
}

static int vp_attach(struct vprov *v, struct io_uring *ring, char *why, size_t whylen)
{
    int ret = vmt_iouring_attach(v->cache, ring, 256, &v->dev);
    if (ret < 0)
        snprintf(why, whylen, "vmt_iouring_attach: %s", strerror(-ret));
    return ret;
}

static int vp_setup(void **ctx, struct io_uring *ring, const char *variant, char *why,
                    size_t whylen)
{
    struct vprov *v = calloc(1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    struct vmt_cache_opts o;
    memset(&o, 0, sizeof(o));
    o.sz = sizeof(o);
    o.tracker = variant;
    int ret = vmt_cache_create(&o, &v->cache);
    if (ret < 0) {
        snprintf(why, whylen, "tracker %s: %s", variant ? variant : "auto", strerror(-ret));
        free(v);
        if (tracker_unavailable(ret) && variant)
            explain_unavailable(variant, why, whylen);
        return tracker_unavailable(ret) ? -ENOTSUP : ret;
    }
    v->own_cache = 1;
    const char *in_use = vmt_cache_tracker(v->cache);
    if (variant && strcmp(variant, "auto") != 0 && (!in_use || strcmp(in_use, variant) != 0)) {
        snprintf(why, whylen, "asked for tracker %s, got %s", variant, in_use ? in_use : "?");
        vmt_cache_destroy(v->cache);
        free(v);
        return -ENOTSUP;
    }
    ret = vp_attach(v, ring, why, whylen);
    if (ret < 0) {
        vmt_cache_destroy(v->cache);
        free(v);
        return ret;
    }
    *ctx = v;
    return 0;
}

static int vp_get(void *ctx, void *addr, size_t len, int *fixed_index, void **token)
{
    struct vprov *v = ctx;
    struct vmt_reg *reg;
    int ret = vmt_get(v->dev, addr, len, VMT_ACCESS_READ, &reg);
    if (ret < 0)
        return ret;
    int idx = vmt_iouring_index(reg);
    if (idx < 0) {
        vmt_put(reg);
        return idx;
    }
    *fixed_index = idx;
    *token = reg;
    return 0;
}

static void vp_put(void *ctx, void *token)
{
    (void)ctx;
    vmt_put(token);
}

static void vp_teardown(void *ctx)
{
    struct vprov *v = ctx;
    if (!v)
        return;
    if (v->dev)
        vmt_iouring_detach(v->dev);
    if (v->own_cache)
        vmt_cache_destroy(v->cache);
    free(v);
}

/* In a fork child: the core gives the child an empty cache with no devices; keep using the
 * same cache object (that is what a library holding a cache pointer across fork does) and
 * attach the child's own ring. The parent's device is never touched. */
static int vp_fork_child(void *parent_ctx, void **child_ctx, struct io_uring *ring,
                         const char *variant, char *why, size_t whylen)
{
    (void)variant;
    struct vprov *pv = parent_ctx;
    struct vprov *v = calloc(1, sizeof(*v));
    if (!v)
        return -ENOMEM;
    v->cache = pv->cache;
    v->own_cache = 0;  /* the parent's copy owns it; the child exits without destroying it */
    int ret = vp_attach(v, ring, why, whylen);
    if (ret < 0) {
        free(v);
        return ret;
    }
    *child_ctx = v;
    return 0;
}

const struct scn_provider scn_provider_vmtrack = {
    .name = "vmtrack",
    .setup = vp_setup,
    .get = vp_get,
    .put = vp_put,
    .teardown = vp_teardown,
    .fork_child = vp_fork_child,
};
