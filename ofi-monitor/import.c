/* libvmtrack-ofi's constructor and API: import vmtrack's monitor into libfabric, or say why
 * not. The import has to happen before any domain exists (libfabric refuses to replace a
 * monitor in use), so the constructor does it; libfabric's own initialisation (fi_ini, at the
 * first fi_getinfo) keeps an imported monitor unless FI_MR_CACHE_MONITOR names another one,
 * which it would then apply silently: that case is refused here, with the reason. */
#define _GNU_SOURCE
#include "config.h"

#include <errno.h>
#include <pthread.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include <rdma/fabric.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_ext.h>

#include "monitor.h"
#include "vmtrack_ofi.h"

#define VMT_OFI_EXPORT __attribute__((visibility("default")))

/* libfabric 1.13.0/1.13.1 crash with an imported monitor (open-mpi/ompi#9255). */
#define MIN_MAJOR 1
#define MIN_MINOR 14

static struct vmt_ofi_mon g_mon;
static pthread_mutex_t g_lock = PTHREAD_MUTEX_INITIALIZER;
static int g_state;            /* 1 imported, 0 not tried or declined, <0 failed */
static int g_tried;
static char g_why[320] = "not imported yet";

static int refuse(int err, const char *fmt, const char *arg)
{
    char msg[256];
    snprintf(msg, sizeof(msg), fmt, arg);
    snprintf(g_why, sizeof(g_why), "%s", msg);
    g_state = err;
    fprintf(stderr, "libvmtrack-ofi: not imported, libfabric keeps its own monitor: %s\n", msg);
    return err;
}

static int import_locked(void)
{
    uint32_t v = fi_version();
    char ver[32];
    snprintf(ver, sizeof(ver), "%u.%u", FI_MAJOR(v), FI_MINOR(v));
    if (FI_MAJOR(v) < MIN_MAJOR || (FI_MAJOR(v) == MIN_MAJOR && FI_MINOR(v) < MIN_MINOR))
        return refuse(-ENOTSUP, "libfabric %s is older than 1.14 (its import monitor is "
                      "broken before 1.14)", ver);
    const char *env = getenv("FI_MR_CACHE_MONITOR");
    if (env && *env)
        return refuse(-ECANCELED, "FI_MR_CACHE_MONITOR=%s is set: libfabric applies it at its "
                      "initialisation and would silently replace vmtrack's monitor (unset it)",
                      env);
    int ret = vmt_ofi_mon_init(&g_mon, 0);
    if (ret < 0)
        return refuse(ret, "%s", strerror(-ret));
    struct fid *cache_fid;
    ret = fi_open(FI_VERSION(1, 13), "mr_cache", NULL, 0, 0, &cache_fid, NULL);
    if (ret)
        return refuse(ret, "fi_open(\"mr_cache\"): %s", fi_strerror(-ret));
    ret = fi_import_fid(cache_fid, &g_mon.fid.fid, 0);
    fi_close(cache_fid);   /* only the mr_cache fid: the import stays */
    if (ret == -FI_EBUSY)
        return refuse(-EBUSY, "%s", "fi_import_fid: -FI_EBUSY: another memory monitor was "
                      "imported first (Open MPI's common_ofi?) or a domain is already open");
    if (ret)
        return refuse(ret, "fi_import_fid: %s", fi_strerror(-ret));
    g_state = 1;
    snprintf(g_why, sizeof(g_why), "imported into libfabric %s", ver);
    return 0;
}

VMT_OFI_EXPORT int vmt_ofi_import(void)
{
    pthread_mutex_lock(&g_lock);
    int ret = g_state == 1 ? 0 : g_tried ? g_state : (g_tried = 1, import_locked());
    pthread_mutex_unlock(&g_lock);
    return ret;
}

VMT_OFI_EXPORT int vmt_ofi_state(char *why, size_t len)
{
    pthread_mutex_lock(&g_lock);
    int s = g_state;
    if (why && len)
        snprintf(why, len, "%s", g_why);
    pthread_mutex_unlock(&g_lock);
    return s;
}

VMT_OFI_EXPORT const char *vmt_ofi_tracker(void)
{
    return g_mon.tracker;
}

VMT_OFI_EXPORT int vmt_ofi_stats_get(struct vmt_ofi_stats *st)
{
    if (!st || st->sz < sizeof(st->sz) + sizeof(uint64_t))
        return -EINVAL;
    if (g_state != 1)
        return -ENODEV;
    vmt_ofi_mon_stats(&g_mon, st);
    return 0;
}

VMT_OFI_EXPORT int vmt_ofi_witness(const void *addr, size_t len)
{
    if (g_state != 1)
        return -ENODEV;
    vmt_ofi_mon_witness(&g_mon, (uintptr_t)addr, len);
    return 0;
}

__attribute__((constructor)) static void vmt_ofi_ctor(void)
{
    const char *env = getenv("VMTRACK_OFI");
    if (env && !strcmp(env, "0")) {
        snprintf(g_why, sizeof(g_why), "VMTRACK_OFI=0: not imported by the constructor");
        return;
    }
    vmt_ofi_import();
}
