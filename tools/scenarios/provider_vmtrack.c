/* The scenario provider for vmtrack itself: a cache with the tracker named by the variant, and
 * the io_uring device on the scenario's ring. */
#define _GNU_SOURCE
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <vmtrack.h>
#include <vmtrack/iouring.h>

#include "scenario.h"
#include "scn_internal.h"

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

/* Where create_explained puts the core's reason. */
struct reason {
    char *why;
    size_t whylen;
};

static void keep_reason(void *arg, int level, const char *line)
{
    struct reason *r = arg;
    const char *u = strstr(line, "unavailable: ");
    if (u && r->whylen && !r->why[0]) {
        u += 13;
        snprintf(r->why, r->whylen, "%s", u);
    }
    if (level <= VMT_LOG_LEVEL_WARN)  /* not an explanation: let it be seen */
        fprintf(stderr, "vmtrack: %s\n", line);
}

/* vmt_cache_create with the tracker's name, listening to what the core explains: when the
 * tracker cannot be used, the core's one-line reason ("kmod: unavailable: ...") goes to why. */
static int create_explained(const struct vmt_cache_opts *o, struct vmt_cache **c, char *why,
                            size_t whylen)
{
    struct reason r = {why, whylen};
    int level = vmt_set_log_level(VMT_LOG_LEVEL_INFO);
    vmt_set_log_fn(keep_reason, &r);
    int ret = vmt_cache_create(o, c);
    vmt_set_log_fn(NULL, NULL);
    vmt_set_log_level(level);
    return ret;
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
    VMT_OPTS(vmt_cache_opts, o, .tracker = variant);
    if (whylen)
        why[0] = 0;
    /* Plainly first, so that whatever goes wrong inside (a crash) is seen on stderr; only a
     * tracker that is not available is asked again, listening, for the core's reason. */
    int ret = vmt_cache_create(&o, &v->cache);
    if (ret < 0 && tracker_unavailable(ret)) {
        struct vmt_cache *again = NULL;
        if (create_explained(&o, &again, why, whylen) == 0)
            vmt_cache_destroy(again);
    }
    if (ret < 0) {
        if (whylen && !why[0])
            snprintf(why, whylen, "tracker %s: %s", variant ? variant : "auto", strerror(-ret));
        free(v);
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
    if (!v->own_cache)  /* a fork child: flush what it cached, never what the parent holds */
        vmt_flush(v->cache);
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
