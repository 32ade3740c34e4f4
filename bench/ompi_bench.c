/* Hit cost through Open MPI's rcache framework: vmtrack against grdma on the same workload.
 * After MPI_Init (singleton), both modules are created with mca_rcache_base_module_create over
 * a BTL whose register_mem does nothing but fill its fields (only hits are measured: every
 * region is registered once before timing). Workloads:
 *   random: 1024 regions of 64 KiB (4 KiB apart, never merged), register+deregister pairs on
 *           regions picked at random;
 *   repeat: register+deregister pairs on the same region (the lowest-addressed one, and the
 *           middle one: grdma's lookup cost depends on where the region sits in its tree).
 * Also vmtrack's own C API on the same regions (vmt_get/vmt_put), to show the adapter's share.
 * Prints ns per pair. One run; no pass/fail.
 * Usage: ompi_bench [pairs [whole]]  (whole: each pair registers its whole region instead of
 * 4 KiB at offset 128) */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <mpi.h>

#include "opal_config.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/mca/rcache/rcache.h"

#include "ompi_testenv.h"
#include "vmtrack.h"

#define NREG 1024
#define REGION (64 * 1024)
#define STRIDE (REGION + 4096)

struct breg {
    mca_rcache_base_registration_t base;
    uint64_t key;
};
static unsigned long btl_regs;

static int b_register(void *d, void *base, size_t size, mca_rcache_base_registration_t *reg)
{
    (void) d;
    (void) size;
    ((struct breg *) reg)->key = (uintptr_t) base ^ 0x5a5a;
    btl_regs++;
    return OPAL_SUCCESS;
}

static int b_deregister(void *d, mca_rcache_base_registration_t *reg)
{
    (void) d;
    (void) reg;
    return OPAL_SUCCESS;
}

static int v_reg(void *ctx, void *addr, size_t len, unsigned access, void **handle)
{
    (void) ctx;
    (void) len;
    (void) access;
    *handle = addr;
    return 0;
}

static void v_dereg(void *ctx, void *handle)
{
    (void) ctx;
    (void) handle;
}

static double now_ns(void)
{
    struct timespec ts;
    clock_gettime(CLOCK_MONOTONIC, &ts);
    return ts.tv_sec * 1e9 + ts.tv_nsec;
}

static unsigned char *base;
static size_t off = 128, span = 4096;   /* what each timed pair registers inside its region */
static uint32_t *order;
static long pairs;

/* random_order: 1 random regions; 0 region `fixed` every time */
static uint32_t fixed;

static int run_rcache(mca_rcache_base_module_t *m, int random_order, double *ns)
{
    mca_rcache_base_registration_t *r;
    for (int i = 0; i < NREG; i++) {   /* warm: every region registered once */
        if (OPAL_SUCCESS != m->rcache_register(m, base + (size_t) i * STRIDE, REGION, 0,
                                               MCA_RCACHE_ACCESS_ANY, &r))
            return -1;
        m->rcache_deregister(m, r);
    }
    unsigned long before = btl_regs;
    double t0 = now_ns();
    for (long k = 0; k < pairs; k++) {
        uint32_t i = random_order ? order[k & (NREG * 64 - 1)] : fixed;
        if (OPAL_SUCCESS != m->rcache_register(m, base + (size_t) i * STRIDE + off, span, 0,
                                               MCA_RCACHE_ACCESS_LOCAL_WRITE, &r))
            return -1;
        m->rcache_deregister(m, r);
    }
    *ns = (now_ns() - t0) / pairs;
    if (btl_regs != before)
        fprintf(stderr, "note: %lu BTL registrations during the timed loop (misses)\n",
                btl_regs - before);
    return 0;
}

static int run_vmt(struct vmt_device *dev, int random_order, double *ns)
{
    struct vmt_reg *r;
    for (int i = 0; i < NREG; i++) {
        if (vmt_get(dev, base + (size_t) i * STRIDE, REGION, VMT_ACCESS_ALL, &r) < 0)
            return -1;
        vmt_put(r);
    }
    double t0 = now_ns();
    for (long k = 0; k < pairs; k++) {
        uint32_t i = random_order ? order[k & (NREG * 64 - 1)] : fixed;
        if (vmt_get(dev, base + (size_t) i * STRIDE + off, span, VMT_ACCESS_READ | VMT_ACCESS_WRITE,
                    &r) < 0)
            return -1;
        vmt_put(r);
    }
    *ns = (now_ns() - t0) / pairs;
    return 0;
}

static mca_rcache_base_module_t *make(const char *comp)
{
    mca_rcache_base_resources_t res = {
        .cache_name = "bench",
        .reg_data = NULL,
        .sizeof_reg = sizeof(struct breg),
        .register_mem = b_register,
        .deregister_mem = b_deregister,
    };
    return mca_rcache_base_module_create(comp, NULL, &res);
}

int main(int argc, char **argv)
{
    pairs = argc > 1 ? atol(argv[1]) : 2000000;
    if (pairs <= 0)
        pairs = 2000000;
    if (argc > 2 && 0 == strcmp(argv[2], "whole")) {   /* register whole regions */
        off = 0;
        span = REGION;
    }
    if (0 != vmt_ompi_test_mpi_init(&argc, &argv))
        return 99;
    base = mmap(NULL, (size_t) NREG * STRIDE, PROT_READ | PROT_WRITE,
                MAP_PRIVATE | MAP_ANONYMOUS | MAP_POPULATE, -1, 0);
    if (MAP_FAILED == base)
        return 99;
    order = malloc(sizeof(*order) * NREG * 64);
    uint64_t x = 88172645463325252ull;
    for (int k = 0; k < NREG * 64; k++) {
        x ^= x << 13;
        x ^= x >> 7;
        x ^= x << 17;
        order[k] = (uint32_t) (x % NREG);
    }

    mca_rcache_base_module_t *gm = make("grdma"), *vm = make("vmtrack");
    if (!gm || !vm) {
        fprintf(stderr, "module creation failed (grdma %p, vmtrack %p)\n", (void *) gm,
                (void *) vm);
        return 99;
    }
    VMT_OPTS(vmt_device_ops, ops, .name = "bench-raw", .reg = v_reg, .dereg = v_dereg);
    struct vmt_device *dev = NULL;
    if (vmt_device_attach(vmt_shared(), &ops, &ops, &dev) < 0)
        return 99;

    /* [0] random, [1] the lowest region every time, [2] the middle region every time */
    double g[3], v[3], r[3];
    int rc = 0;
    for (int w = 0; w < 3; w++) {
        fixed = 1 == w ? 0 : NREG / 2;
        rc |= run_rcache(gm, 0 == w, &g[w]) | run_rcache(vm, 0 == w, &v[w]) |
              run_vmt(dev, 0 == w, &r[w]);
    }
    if (rc) {
        fprintf(stderr, "a registration failed\n");
        return 1;
    }
    printf("Open MPI rcache hit cost, ns per register+deregister pair (%ld pairs, %d regions of "
           "%d KiB, each pair %zu bytes at offset %zu; vmtrack tracker: %s)\n", pairs, NREG,
           REGION / 1024, span, off, vmt_cache_tracker(vmt_shared()));
    printf("%-34s %10s %14s %14s\n", "", "random", "same, lowest", "same, middle");
    printf("%-34s %10.1f %14.1f %14.1f\n", "grdma (framework)", g[0], g[1], g[2]);
    printf("%-34s %10.1f %14.1f %14.1f\n", "vmtrack (framework)", v[0], v[1], v[2]);
    printf("%-34s %10.1f %14.1f %14.1f\n", "vmtrack C API (vmt_get/vmt_put)", r[0], r[1], r[2]);
    printf("%-34s %9.2fx %13.2fx %13.2fx\n", "grdma / vmtrack (framework)", g[0] / v[0],
           g[1] / v[1], g[2] / v[2]);
    vmt_device_detach(dev);
    mca_rcache_base_module_destroy(vm);
    mca_rcache_base_module_destroy(gm);
    MPI_Finalize();
    return 0;
}
