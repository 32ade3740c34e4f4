/* UCX's side of the miss workloads of `vmtrack bench --compare-ucx` (bench/miss_workloads.h):
 * ucs_rcache with its own libc hooks (UCM_EVENT_VM_UNMAPPED, so that an unmapped
 * buffer leaves the cache as it would in an application), limited to MISS_CACHE_LIMIT regions,
 * with mem_reg/mem_dereg callbacks that do nothing (like vmtrack's null device). */
#include "config.h"
#include <errno.h>
#include <stdio.h>
#include <string.h>
#include "commands.h"
#include "miss_workloads.h"

#ifndef HAVE_UCX
int vmtrack_bench_ucx_miss(const char *workload, size_t ops, int threads, double out[5])
{
    (void)workload; (void)ops; (void)threads; (void)out;
    fprintf(stderr, "vmtrack bench: built without UCX (libucx-dev), no --compare-ucx\n");
    return -ENOSYS;
}
#else

#include <stdint.h>
#include <sys/mman.h>
#include <unistd.h>
#include <ucm/api/ucm.h>
#include "bench_ucx_rcache.h"
#include <ucs/memory/rcache.h>

static struct null_count *null_registrations;  /* mem_reg calls: the cache's misses */

static ucs_status_t null_mem_reg(void *context, ucs_rcache_t *rcache, void *arg,
                                 ucs_rcache_region_t *region, uint16_t flags)
{
    (void)context; (void)rcache; (void)arg; (void)region; (void)flags;
    null_count_add(null_registrations);
    return UCS_OK;
}

static unsigned long ucx_registrations(void *ctx)
{
    (void)ctx;
    return null_count_read(null_registrations);
}

static void null_mem_dereg(void *context, ucs_rcache_t *rcache, ucs_rcache_region_t *region)
{
    (void)context; (void)rcache; (void)region;
}

static const ucs_rcache_ops_t null_ops = BENCH_UCX_RCACHE_OPS(null_mem_reg, null_mem_dereg);

static int ucx_get(void *ctx, void *addr, size_t len, void **handle)
{
    ucs_rcache_region_t *region;
    if (bench_ucx_rcache_get(ctx, addr, len, &region) != UCS_OK)
        return -EIO;
    *handle = region;
    return 0;
}

static void ucx_put(void *ctx, void *handle)
{
    ucs_rcache_region_put(ctx, handle);
}

int vmtrack_bench_ucx_miss(const char *workload, size_t ops, int threads, double out[5])
{
    int w = miss_workload_parse(workload);
    if (w < 0) {
        fprintf(stderr, "vmtrack-ucx-bench: unknown miss workload \"%s\"\n", workload);
        return -EINVAL;
    }
    struct miss_result res;
    if (!null_registrations && !(null_registrations = null_count_new()))
        return -ENOMEM;

    ucs_rcache_t *rcache;
    ucs_status_t status =
        bench_ucx_rcache_create(&null_ops, MISS_CACHE_LIMIT, "vmtrack-bench-miss", &rcache);
    if (status != UCS_OK) {
        fprintf(stderr, "vmtrack-ucx-bench: ucs_rcache_create: %s\n", ucs_status_string(status));
        return -EIO;
    }
    struct miss_cache cache = {rcache, ucx_get, ucx_put, ucx_registrations};
    int rc = miss_run(&cache, (enum miss_workload)w, ops, threads, &res);
    ucs_rcache_destroy(rcache);
    if (rc)
        return rc;
    out[0] = res.ns_per_op;
    out[1] = res.ops_per_sec;
    out[2] = res.ops_per_cpu_sec;
    out[3] = res.once_without_ns;
    out[4] = res.regs_per_op;
    return 0;
}
#endif
