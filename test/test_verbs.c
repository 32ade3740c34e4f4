/* The verbs device on a real RDMA device (soft-RoCE in the guest rig): ibv_reg_mr through the
 * cache, access rights, hits, sharing a PD, errors. Skips (exit 77) where no RDMA device
 * exists, saying so. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <infiniband/verbs.h>
#include <vmtrack.h>
#include <vmtrack/verbs.h>

static struct ibv_context *g_ctx;
static struct ibv_pd *g_pd;

static struct vmt_cache *make_cache(void)
{
    struct vmt_cache_opts o;
    memset(&o, 0, sizeof(o));
    o.sz = sizeof(o);
    o.tracker = "none";
    struct vmt_cache *c = NULL;
    int ret = vmt_cache_create(&o, &c);
    ck_assert_msg(ret == 0, "vmt_cache_create: %s", strerror(-ret));
    return c;
}

START_TEST(test_reg_hit_access)
{
    struct vmt_cache *c = make_cache();
    struct vmt_device *dev;
    ck_assert_int_eq(vmt_verbs_attach(c, g_pd, &dev), 0);
    size_t len = 256 * 1024;
    char *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    ck_assert_ptr_ne(buf, MAP_FAILED);
    memset(buf, 1, len);

    struct vmt_reg *r1, *r2, *r3;
    ck_assert_int_eq(vmt_get(dev, buf, len, VMT_ACCESS_READ, &r1), 0);
    struct ibv_mr *mr = vmt_verbs_mr(r1);
    ck_assert_ptr_nonnull(mr);
    ck_assert_ptr_eq(mr->pd, g_pd);
    ck_assert((char *)mr->addr <= buf);
    ck_assert((char *)mr->addr + mr->length >= buf + len);
    /* a hit: the same MR */
    ck_assert_int_eq(vmt_get(dev, buf + 4096, 8192, VMT_ACCESS_READ, &r2), 0);
    ck_assert_ptr_eq(vmt_verbs_mr(r2), mr);
    vmt_put(r2);
    vmt_put(r1);
    /* remote write needs more rights: a new MR whose rights include them */
    ck_assert_int_eq(vmt_get(dev, buf, len, VMT_ACCESS_REMOTE_WRITE | VMT_ACCESS_WRITE, &r3), 0);
    ck_assert_ptr_nonnull(vmt_verbs_mr(r3));
    ck_assert(vmt_reg_access(r3) & VMT_ACCESS_REMOTE_WRITE);
    ck_assert_uint_ne(vmt_verbs_mr(r3)->rkey, 0);
    vmt_put(r3);

    struct vmt_stats s;
    memset(&s, 0, sizeof(s));
    s.sz = sizeof(s);
    ck_assert_int_eq(vmt_stats_get(c, &s), 0);
    ck_assert_uint_ge(s.hits, 1);
    ck_assert_uint_ge(s.registrations, 2);
    vmt_device_detach(dev);
    vmt_cache_destroy(c);
    munmap(buf, len);
}
END_TEST

START_TEST(test_same_pd_same_device)
{
    struct vmt_cache *c = make_cache();
    struct vmt_device *d1, *d2;
    ck_assert_int_eq(vmt_verbs_attach(c, g_pd, &d1), 0);
    ck_assert_int_eq(vmt_verbs_attach(c, g_pd, &d2), 0);
    ck_assert_ptr_eq(d1, d2);
    vmt_device_detach(d1);
    vmt_device_detach(d2);
    vmt_cache_destroy(c);
}
END_TEST

START_TEST(test_errors)
{
    struct vmt_cache *c = make_cache();
    struct vmt_device *dev;
    ck_assert_int_eq(vmt_verbs_attach(NULL, g_pd, &dev), -EINVAL);
    ck_assert_int_eq(vmt_verbs_attach(c, NULL, &dev), -EINVAL);
    ck_assert_ptr_null(vmt_verbs_mr(NULL));
    ck_assert_int_eq(vmt_verbs_attach(c, g_pd, &dev), 0);
    void *hole = mmap(NULL, 65536, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    munmap(hole, 65536);
    struct vmt_reg *r;
    int ret = vmt_get(dev, hole, 65536, VMT_ACCESS_READ, &r);
    ck_assert_msg(ret < 0, "unmapped memory was registered");
    vmt_device_detach(dev);
    vmt_cache_destroy(c);
}
END_TEST

int main(void)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        printf("SKIP: no RDMA device here (ibv_get_device_list found %d%s%s); run it on "
               "soft-RoCE with test/vm/run --rxe\n",
               n, list ? "" : ": ", list ? "" : strerror(errno));
        if (list)
            ibv_free_device_list(list);
        return 77;
    }
    g_ctx = ibv_open_device(list[0]);
    if (!g_ctx) {
        printf("SKIP: cannot open RDMA device %s: %s\n", ibv_get_device_name(list[0]),
               strerror(errno));
        ibv_free_device_list(list);
        return 77;
    }
    printf("RDMA device: %s\n", ibv_get_device_name(list[0]));
    g_pd = ibv_alloc_pd(g_ctx);
    if (!g_pd) {
        printf("FAIL: ibv_alloc_pd on %s: %s\n", ibv_get_device_name(list[0]), strerror(errno));
        return 1;
    }
    Suite *s = suite_create("verbs");
    TCase *tc = tcase_create("device");
    tcase_add_test(tc, test_reg_hit_access);
    tcase_add_test(tc, test_same_pd_same_device);
    tcase_add_test(tc, test_errors);
    suite_add_tcase(s, tc);
    SRunner *sr = srunner_create(s);
    /* The device context and PD are opened once, here: no fork between them and the tests. */
    srunner_set_fork_status(sr, CK_NOFORK);
    srunner_run_all(sr, CK_NORMAL);
    int failed = srunner_ntests_failed(sr);
    srunner_free(sr);
    ibv_dealloc_pd(g_pd);
    ibv_close_device(g_ctx);
    ibv_free_device_list(list);
    return failed ? 1 : 0;
}
