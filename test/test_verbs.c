/* The verbs device on a real RDMA device (soft-RoCE in the guest rig): ibv_reg_mr through the
 * cache, access rights, hits, sharing a PD, errors. Skips (exit 77) where no RDMA device
 * exists, saying so. */
#define _GNU_SOURCE
#include <check.h>
#include <errno.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <infiniband/verbs.h>
#include <vmtrack.h>
#include <vmtrack/verbs.h>
#include "lib/vmt_test.h"

static struct ibv_context *g_ctx;
static struct ibv_pd *g_pd;

START_TEST(reg_hit_access)
{
    struct vmt_cache *c = cache_open("none");
    struct vmt_device *dev;
    ck_assert_int_eq(vmt_verbs_attach(c, g_pd, &dev), 0);
    size_t len = 256 * 1024;
    char *buf = map_filled(len, 1);

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

    struct vmt_stats s = stats_of(c);
    ck_assert_uint_ge(s.hits, 1);
    ck_assert_uint_ge(s.registrations, 2);
    vmt_device_detach(dev);
    vmt_cache_destroy(c);
    munmap(buf, len);
}
END_TEST

START_TEST(same_pd_same_device)
{
    struct vmt_cache *c = cache_open("none");
    struct vmt_device *d1, *d2;
    ck_assert_int_eq(vmt_verbs_attach(c, g_pd, &d1), 0);
    ck_assert_int_eq(vmt_verbs_attach(c, g_pd, &d2), 0);
    ck_assert_ptr_eq(d1, d2);
    vmt_device_detach(d1);
    vmt_device_detach(d2);
    vmt_cache_destroy(c);
}
END_TEST

START_TEST(errors)
{
    struct vmt_cache *c = cache_open("none");
    struct vmt_device *dev;
    ck_assert_int_eq(vmt_verbs_attach(NULL, g_pd, &dev), -EINVAL);
    ck_assert_int_eq(vmt_verbs_attach(c, NULL, &dev), -EINVAL);
    ck_assert_ptr_null(vmt_verbs_mr(NULL));
    ck_assert_int_eq(vmt_verbs_attach(c, g_pd, &dev), 0);
    void *hole = map_anon(65536);
    munmap(hole, 65536);
    struct vmt_reg *r;
    int ret = vmt_get(dev, hole, 65536, VMT_ACCESS_READ, &r);
    ck_assert_msg(ret < 0, "unmapped memory was registered");
    vmt_device_detach(dev);
    vmt_cache_destroy(c);
}
END_TEST

/* ---- the data path: RDMA WRITE between two RC QPs of this process (loopback) ------------- */
static int qp_to_rts(struct ibv_qp *qp, uint32_t remote_qpn, const union ibv_gid *gid,
                     int gid_index, enum ibv_mtu mtu)
{
    struct ibv_qp_attr a;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_INIT;
    a.pkey_index = 0;
    a.port_num = 1;
    a.qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT |
                                  IBV_QP_ACCESS_FLAGS))
        return -1;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = mtu;
    a.dest_qp_num = remote_qpn;
    a.rq_psn = 0;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = *gid;
    a.ah_attr.grh.sgid_index = (uint8_t)gid_index;
    a.ah_attr.grh.hop_limit = 1;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                                  IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC |
                                  IBV_QP_MIN_RNR_TIMER))
        return -2;
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.sq_psn = 0;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                                  IBV_QP_RNR_RETRY | IBV_QP_SQ_PSN | IBV_QP_MAX_QP_RD_ATOMIC))
        return -3;
    return 0;
}

START_TEST(rdma_write_through_cache)
{
    struct ibv_port_attr port;
    ck_assert_int_eq(ibv_query_port(g_ctx, 1, &port), 0);
    union ibv_gid gid;
    int gid_index = 0;
    ck_assert_int_eq(ibv_query_gid(g_ctx, 1, gid_index, &gid), 0);
    struct ibv_cq *cq = ibv_create_cq(g_ctx, 16, NULL, NULL, 0);
    ck_assert_ptr_nonnull(cq);
    struct ibv_qp_init_attr qa;
    memset(&qa, 0, sizeof(qa));
    qa.send_cq = cq;
    qa.recv_cq = cq;
    qa.qp_type = IBV_QPT_RC;
    qa.cap.max_send_wr = 4;
    qa.cap.max_recv_wr = 4;
    qa.cap.max_send_sge = 1;
    qa.cap.max_recv_sge = 1;
    struct ibv_qp *q1 = ibv_create_qp(g_pd, &qa);
    struct ibv_qp *q2 = ibv_create_qp(g_pd, &qa);
    ck_assert_ptr_nonnull(q1);
    ck_assert_ptr_nonnull(q2);
    enum ibv_mtu mtu = port.active_mtu ? port.active_mtu : IBV_MTU_1024;
    ck_assert_int_eq(qp_to_rts(q1, q2->qp_num, &gid, gid_index, mtu), 0);
    ck_assert_int_eq(qp_to_rts(q2, q1->qp_num, &gid, gid_index, mtu), 0);

    struct vmt_cache *c = cache_open("none");
    struct vmt_device *dev;
    ck_assert_int_eq(vmt_verbs_attach(c, g_pd, &dev), 0);
    size_t len = 64 * 1024;
    /* Two buffers with a hole between them, so that the cache keeps two registrations. */
    unsigned char *src = map_anon(3 * len);
    unsigned char *dst = src + 2 * len;
    munmap(src + len, len);
    struct vmt_stats s;
    uint64_t regs_after_first = 0;
    for (int round = 0; round < 2; round++) {  /* the second round registers nothing new */
        for (size_t i = 0; i < len; i++)
            src[i] = (unsigned char)(i * 7 + round * 3 + 1);
        memset(dst, 0, len);
        struct vmt_reg *rs, *rd;
        ck_assert_int_eq(vmt_get(dev, src, len, VMT_ACCESS_READ, &rs), 0);
        ck_assert_int_eq(vmt_get(dev, dst, len, VMT_ACCESS_REMOTE_WRITE, &rd), 0);
        struct ibv_sge sge = {(uintptr_t)src, (uint32_t)len, vmt_verbs_mr(rs)->lkey};
        struct ibv_send_wr wr, *bad = NULL;
        memset(&wr, 0, sizeof(wr));
        wr.wr_id = 1;
        wr.sg_list = &sge;
        wr.num_sge = 1;
        wr.opcode = IBV_WR_RDMA_WRITE;
        wr.send_flags = IBV_SEND_SIGNALED;
        wr.wr.rdma.remote_addr = (uintptr_t)dst;
        wr.wr.rdma.rkey = vmt_verbs_mr(rd)->rkey;
        ck_assert_int_eq(ibv_post_send(q1, &wr, &bad), 0);
        struct ibv_wc wc;
        int n = 0;
        for (long spin = 0; n == 0 && spin < 200000000L; spin++)
            n = ibv_poll_cq(cq, 1, &wc);
        ck_assert_int_eq(n, 1);
        ck_assert_msg(wc.status == IBV_WC_SUCCESS, "RDMA WRITE: %s", ibv_wc_status_str(wc.status));
        ck_assert_msg(memcmp(src, dst, len) == 0, "RDMA WRITE through cached MRs: wrong bytes");
        vmt_put(rs);
        vmt_put(rd);
        s = stats_of(c);
        if (round == 0)
            regs_after_first = s.registrations;
    }
    ck_assert_uint_eq(s.registrations, regs_after_first);
    ck_assert_uint_ge(s.hits, 1);
    printf("RDMA WRITE of %zu bytes through cached MRs: ok (%llu registrations, %llu hits)\n",
           len, (unsigned long long)s.registrations, (unsigned long long)s.hits);
    vmt_device_detach(dev);
    vmt_cache_destroy(c);
    ibv_destroy_qp(q1);
    ibv_destroy_qp(q2);
    ibv_destroy_cq(cq);
    munmap(src, len);
    munmap(dst, len);
}
END_TEST

int main(void)
{
    int n = 0;
    struct ibv_device **list = ibv_get_device_list(&n);
    if (!list || n == 0) {
        if (list)
            ibv_free_device_list(list);
        return test_skip("no RDMA device here (ibv_get_device_list found %d%s%s); run it on "
                         "soft-RoCE with test/vm/run --rxe",
                         n, list ? "" : ": ", list ? "" : strerror(errno));
    }
    g_ctx = ibv_open_device(list[0]);
    if (!g_ctx) {
        int rc = test_skip("cannot open RDMA device %s: %s", ibv_get_device_name(list[0]),
                           strerror(errno));
        ibv_free_device_list(list);
        return rc;
    }
    printf("RDMA device: %s\n", ibv_get_device_name(list[0]));
    g_pd = ibv_alloc_pd(g_ctx);
    if (!g_pd) {
        printf("FAIL: ibv_alloc_pd on %s: %s\n", ibv_get_device_name(list[0]), strerror(errno));
        return 1;
    }
    Suite *s = suite_create("verbs");
    TCase *tc = tcase_create("device");
    tcase_add_test(tc, reg_hit_access);
    tcase_add_test(tc, same_pd_same_device);
    tcase_add_test(tc, errors);
    tcase_add_test(tc, rdma_write_through_cache);
    tcase_set_timeout(tc, 120);
    suite_add_tcase(s, tc);
    /* The device context and PD are opened once, here: no fork between them and the tests. */
    int failed = check_run(s, CK_NOFORK);
    ibv_dealloc_pd(g_pd);
    ibv_close_device(g_ctx);
    ibv_free_device_list(list);
    return failed ? 1 : 0;
}
