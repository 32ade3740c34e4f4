/* One cache for both stacks: in one process Open MPI's vmtrack rcache component (through Open
 * MPI's framework, a fake BTL), a UCX rcache set up as UCX's ib md sets up its own (served by
 * libvmtrack-ucx) and an io_uring user register the same buffer. Asserted: one index entry,
 * one registration per device, one unmap event retiring all three, and one VMTRACK_MAX_BYTES
 * budget across the stacks (a registration by Open MPI evicts UCX's unused one).
 *
 * libvmtrack-ucx is linked ahead of libucs (the link-order way of loading it, doc/ucx.md), not
 * preloaded. UCX_MEM_MMAP_HOOK_MODE=none must be in place before libucs's constructor runs:
 * main() re-executes itself with it (and a small VMTRACK_MAX_BYTES, and Open MPI's memory
 * patcher off) when it is missing. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <liburing.h>
#include <limits.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <unistd.h>

#include <mpi.h>

#include "opal_config.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/mca/rcache/rcache.h"

#include <ucm/api/ucm.h>
#include <ucs/memory/rcache.h>

#include "ompi_testenv.h"
#include "ucx_rcache_params.h"
#include "vmtrack.h"
#include "vmtrack/iouring.h"
#include "vmtrack_ucx.h"
#include "../lib/check_run.h"

#define BUDGET_MIB 8

/* ---- Open MPI: a fake BTL -------------------------------------------------------------- */
struct btl {
    mca_rcache_base_registration_t base;    /* first: Open MPI's registration */
};
static int btl_regs, btl_live;

static int btl_register(void *data, void *base, size_t size, mca_rcache_base_registration_t *r)
{
    (void)data; (void)base; (void)size; (void)r;
    btl_regs++;
    btl_live++;
    return OPAL_SUCCESS;
}

static int btl_deregister(void *data, mca_rcache_base_registration_t *r)
{
    (void)data; (void)r;
    btl_live--;
    return OPAL_SUCCESS;
}

static mca_rcache_base_module_t *ompi_open(void)
{
    mca_rcache_base_resources_t res = {
        .cache_name = (char *)"onecache.0",
        .sizeof_reg = sizeof(struct btl),
        .register_mem = btl_register,
        .deregister_mem = btl_deregister,
    };
    mca_rcache_base_module_t *m = mca_rcache_base_module_create("vmtrack", NULL, &res);
    ck_assert_ptr_nonnull(m);
    return m;
}

/* ---- UCX: an rcache as the ib md creates it ------------------------------------------- */
static int ucx_regs, ucx_live;

static ucs_status_t ucx_reg(void *ctx, ucs_rcache_t *rc, void *arg, ucs_rcache_region_t *r,
                            uint16_t flags)
{
    (void)ctx; (void)rc; (void)arg; (void)r; (void)flags;
    ucx_regs++;
    ucx_live++;
    return UCS_OK;
}

static void ucx_dereg(void *ctx, ucs_rcache_t *rc, ucs_rcache_region_t *r)
{
    (void)ctx; (void)rc; (void)r;
    ucx_live--;
}

static const ucs_rcache_ops_t ucx_ops = {.mem_reg = ucx_reg, .mem_dereg = ucx_dereg};

static ucs_rcache_t *ucx_open(void)
{
    /* + 64: the md's memh */
    ucs_rcache_params_t p =
        ucx_test_rcache_params(sizeof(ucs_rcache_region_t) + 64, 16, &ucx_ops, NULL);
    ucs_rcache_t *rc = NULL;
    p.flags = UCS_RCACHE_FLAG_PURGE_ON_FORK;
    ck_assert_int_eq(ucs_rcache_create(&p, "onecache-ib", NULL, &rc), UCS_OK);
    struct vmt_ucx_stats st = {.sz = sizeof(st)};
    ck_assert_int_eq(vmt_ucx_stats_get(&st), 0);
    ck_assert_msg(st.native_rcaches >= 1, "the UCX rcache is not served by vmtrack");
    return rc;
}

static struct vmt_stats stats(void)
{
    struct vmt_stats s;
    memset(&s, 0, sizeof(s));
    s.sz = sizeof(s);
    ck_assert_int_eq(vmt_stats_get(vmt_shared(), &s), 0);
    return s;
}

static char *map(size_t bytes)
{
    char *p = mmap(NULL, bytes, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(p, MAP_FAILED);
    memset(p, 7, bytes);
    return p;
}

START_TEST(same_buffer_three_stacks)
{
    mca_rcache_base_module_t *om = ompi_open();
    ucs_rcache_t *uc = ucx_open();
    struct io_uring ring;
    struct vmt_device *iodev;
    int urc = io_uring_queue_init(8, &ring, 0);
    if (urc < 0) {
        printf("SKIP: io_uring_queue_init: %s\n", strerror(-urc));
        return;     /* the other two stacks are still checked below by the budget test */
    }
    ck_assert_int_eq(vmt_iouring_attach(vmt_shared(), &ring, 16, &iodev), 0);
    size_t len = (size_t)1 << 20;
    char *buf = map(len);
    struct vmt_stats before = stats();

    mca_rcache_base_registration_t *oreg = NULL;
    ck_assert_int_eq(om->rcache_register(om, buf, len, 0, MCA_RCACHE_ACCESS_LOCAL_WRITE, &oreg),
                     OPAL_SUCCESS);
    ucs_rcache_region_t *ureg = NULL;
    ck_assert_int_eq(ucs_rcache_get(uc, buf, len, PROT_READ | PROT_WRITE, NULL, &ureg), UCS_OK);
    struct vmt_reg *ioreg = NULL;
    ck_assert_int_eq(vmt_get(iodev, buf, len, VMT_ACCESS_READ | VMT_ACCESS_WRITE, &ioreg), 0);

    struct vmt_stats mid = stats();
    ck_assert_uint_eq(mid.entries, before.entries + 1);               /* one index entry */
    ck_assert_uint_eq(mid.registrations - before.registrations, 3);   /* one per device */
    ck_assert_int_eq(btl_regs, 1);
    ck_assert_int_eq(ucx_regs, 1);
    ck_assert_uint_ge(vmt_reg_len(ioreg), len);

    /* one unmap retires all three; each goes at its holder's release */
    ck_assert_int_eq(munmap(buf, len), 0);
    ck_assert_int_eq(om->rcache_deregister(om, oreg), OPAL_SUCCESS);
    ucs_rcache_region_put(uc, ureg);
    vmt_put(ioreg);
    struct vmt_stats after = stats();
    ck_assert_uint_eq(after.deregistrations - mid.deregistrations, 3);
    ck_assert_int_eq(btl_live, 0);
    ck_assert_int_eq(ucx_live, 0);
    ck_assert_uint_eq(after.entries, before.entries);

    vmt_iouring_detach(iodev);
    io_uring_queue_exit(&ring);
    ucs_rcache_destroy(uc);
    mca_rcache_base_module_destroy(om);
}
END_TEST

START_TEST(one_budget)
{
    mca_rcache_base_module_t *om = ompi_open();
    ucs_rcache_t *uc = ucx_open();
    struct vmt_stats s = stats();
    ck_assert_uint_eq(s.max_bytes, (uint64_t)BUDGET_MIB << 20);

    /* UCX caches 6 MiB; Open MPI then registers 4 MiB elsewhere: over the one budget, so
     * UCX's unused registration is evicted for Open MPI's */
    size_t mib = (size_t)1 << 20;
    /* a gap between them: vmtrack would merge touching ranges into one entry */
    char *a = map(11 * mib), *b = a + 7 * mib;
    ucs_rcache_region_t *ureg = NULL;
    ck_assert_int_eq(ucs_rcache_get(uc, a, 6 * mib, PROT_READ | PROT_WRITE, NULL, &ureg),
                     UCS_OK);
    ucs_rcache_region_put(uc, ureg);
    ck_assert_int_eq(ucx_live, 1);
    mca_rcache_base_registration_t *oreg = NULL;
    ck_assert_int_eq(om->rcache_register(om, b, 4 * mib, 0, MCA_RCACHE_ACCESS_LOCAL_WRITE, &oreg),
                     OPAL_SUCCESS);
    ck_assert_int_eq(btl_live, 1);
    ck_assert_int_eq(ucx_live, 0);
    s = stats();
    ck_assert_uint_le(s.bytes_registered, (uint64_t)BUDGET_MIB << 20);
    ck_assert_uint_ge(s.evictions, 1);
    ck_assert_int_eq(om->rcache_deregister(om, oreg), OPAL_SUCCESS);
    ucs_rcache_destroy(uc);
    mca_rcache_base_module_destroy(om);
}
END_TEST

int main(int argc, char **argv)
{
    const char *mode = getenv("UCX_MEM_MMAP_HOOK_MODE");
    if (!mode || strcmp(mode, "none")) {
        char budget[32];
        snprintf(budget, sizeof(budget), "%dM", BUDGET_MIB);
        setenv("UCX_MEM_MMAP_HOOK_MODE", "none", 1);
        setenv("VMTRACK_MAX_BYTES", budget, 1);
        if (!getenv("VMTRACK_TRACKER"))
            setenv("VMTRACK_TRACKER", "hooks", 1);
        /* one patcher in the process: vmtrack's (doc/ucx.md, "Inside Open MPI") */
        setenv("OMPI_MCA_memory", "^patcher", 1);
        execv("/proc/self/exe", argv);
        perror("re-exec");
        return 1;
    }
    char why[256];
    if (vmt_ucx_mode(why, sizeof(why)) == VMT_UCX_OFF) {
        printf("SKIP: libvmtrack-ucx is off: %s\n", why);
        return 77;
    }
    if (vmt_ompi_test_mpi_init(&argc, &argv) != 0)
        return 77;
    Suite *s = suite_create("one cache for both stacks");
    TCase *tc = tcase_create("shared");
    tcase_set_timeout(tc, 60);
    tcase_add_test(tc, same_buffer_three_stacks);
    tcase_add_test(tc, one_budget);
    suite_add_tcase(s, tc);
    int failed = check_run(s, CK_FORK);
    MPI_Finalize();
    return failed ? 1 : 0;
}
