/* mpirun -np 2: RDMA WRITEs over a verbs device (soft-RoCE rxe0 in the guest rig) whose memory
 * registrations go through Open MPI's rcache framework, module "vmtrack" -- what a registering
 * BTL does, for when no BTL of this Open MPI can connect over RoCE (Debian's openib has only
 * the InfiniBand-only udcm connection manager).
 *
 * Each rank creates the module with mca_rcache_base_module_create("vmtrack", ...) and a
 * register_mem/deregister_mem pair that call ibv_reg_mr/ibv_dereg_mr on its protection domain
 * (the registration carries the ibv_mr, as openib's does). MPI (self/vader) carries only control
 * messages. Every round rank 1 registers its 4 MiB target (REMOTE_WRITE) and sends address and
 * rkey; rank 0 fills and registers its source and RDMA-WRITEs it; rank 1 checks every byte.
 * Every third round both ranks unmap their buffer and map new pages at the same address: a
 * stale registration would make the NIC read the old source pages or write the old target
 * pages, and rank 1 would see wrong bytes.
 * Exit: 0 all bytes right and vmtrack did the registering; 1 wrong bytes; 77 no verbs device
 * (skip); 2 setup error. Usage: mpi_verbs_rdma [rounds] [device] */
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>

#include <infiniband/verbs.h>
#include <mpi.h>

#include "opal_config.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/mca/rcache/rcache.h"

#include "vmtrack.h"
#include "word_pattern.h"

struct vreg {
    mca_rcache_base_registration_t base;
    struct ibv_mr *mr;
};

static unsigned long n_reg, n_dereg;

static int verbs_register(void *pd, void *base, size_t size, mca_rcache_base_registration_t *reg)
{
    int access = IBV_ACCESS_LOCAL_WRITE;   /* rxe wants it with any remote write */
    if (reg->access_flags & MCA_RCACHE_ACCESS_REMOTE_WRITE)
        access |= IBV_ACCESS_REMOTE_WRITE;
    if (reg->access_flags & MCA_RCACHE_ACCESS_REMOTE_READ)
        access |= IBV_ACCESS_REMOTE_READ;
    struct ibv_mr *mr = ibv_reg_mr((struct ibv_pd *) pd, base, size, access);
    if (!mr)
        return OPAL_ERR_OUT_OF_RESOURCE;
    ((struct vreg *) reg)->mr = mr;
    n_reg++;
    return OPAL_SUCCESS;
}

static int verbs_deregister(void *pd, mca_rcache_base_registration_t *reg)
{
    (void) pd;
    n_dereg++;
    return ibv_dereg_mr(((struct vreg *) reg)->mr) ? OPAL_ERROR : OPAL_SUCCESS;
}

struct peer {
    uint32_t qpn, psn;
    union ibv_gid gid;
};

#define DIE(...) do { fprintf(stderr, __VA_ARGS__); fputc('\n', stderr); MPI_Abort(MPI_COMM_WORLD, 2); } while (0)

int main(int argc, char **argv)
{
    MPI_Init(&argc, &argv);
    int rank, size;
    MPI_Comm_rank(MPI_COMM_WORLD, &rank);
    MPI_Comm_size(MPI_COMM_WORLD, &size);
    if (2 != size)
        DIE("run with -np 2");
    const int rounds = argc > 1 ? atoi(argv[1]) : 12;
    const char *devname = argc > 2 ? argv[2] : "rxe0";

    /* ---- verbs: device, PD, CQ, RC QP ---- */
    int ndev = 0, found = 0;
    struct ibv_device **list = ibv_get_device_list(&ndev);
    struct ibv_context *ctx = NULL;
    for (int i = 0; list && i < ndev; i++) {
        if (0 == strcmp(ibv_get_device_name(list[i]), devname)) {
            ctx = ibv_open_device(list[i]);
            found = 1;
        }
    }
    int have = ctx ? 1 : 0, both = 0;
    MPI_Allreduce(&have, &both, 1, MPI_INT, MPI_MIN, MPI_COMM_WORLD);
    if (!both) {
        if (0 == rank)
            printf("SKIP: no verbs device %s here (%s)\n", devname, found ? "open failed" : "absent");
        MPI_Finalize();
        return 77;
    }
    struct ibv_pd *pd = ibv_alloc_pd(ctx);
    struct ibv_cq *cq = ibv_create_cq(ctx, 16, NULL, NULL, 0);
    if (!pd || !cq)
        DIE("pd/cq");
    struct ibv_qp_init_attr qia = {
        .send_cq = cq, .recv_cq = cq, .qp_type = IBV_QPT_RC,
        .cap = {.max_send_wr = 8, .max_recv_wr = 8, .max_send_sge = 1, .max_recv_sge = 1},
    };
    struct ibv_qp *qp = ibv_create_qp(pd, &qia);
    if (!qp)
        DIE("create_qp");
    /* a RoCE v2 GID: the IPv4-mapped one (::ffff:a.b.c.d) of the netdev's address */
    int gid_index = -1;
    struct peer me = {.qpn = qp->qp_num, .psn = 1000u + (uint32_t) rank};
    for (int i = 0; i < 16; i++) {
        union ibv_gid g;
        if (ibv_query_gid(ctx, 1, i, &g))
            break;
        static const uint8_t v4[12] = {0, 0, 0, 0, 0, 0, 0, 0, 0, 0, 0xff, 0xff};
        if (0 == memcmp(g.raw, v4, 12)) {
            gid_index = i;   /* the last IPv4-mapped entry: rxe lists RoCE v1 first, then v2 */
            me.gid = g;
        }
    }
    if (gid_index < 0)
        DIE("rank %d: no IPv4 GID on %s (give the netdev an address)", rank, devname);
    struct peer other;
    MPI_Sendrecv(&me, sizeof(me), MPI_BYTE, 1 - rank, 0, &other, sizeof(other), MPI_BYTE,
                 1 - rank, 0, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
    struct ibv_qp_attr a = {.qp_state = IBV_QPS_INIT, .pkey_index = 0, .port_num = 1,
                            .qp_access_flags = IBV_ACCESS_REMOTE_WRITE | IBV_ACCESS_REMOTE_READ};
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_PKEY_INDEX | IBV_QP_PORT | IBV_QP_ACCESS_FLAGS))
        DIE("INIT");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTR;
    a.path_mtu = IBV_MTU_1024;
    a.dest_qp_num = other.qpn;
    a.rq_psn = other.psn;
    a.max_dest_rd_atomic = 1;
    a.min_rnr_timer = 12;
    a.ah_attr.is_global = 1;
    a.ah_attr.grh.dgid = other.gid;
    a.ah_attr.grh.sgid_index = (uint8_t) gid_index;
    a.ah_attr.grh.hop_limit = 64;
    a.ah_attr.port_num = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_AV | IBV_QP_PATH_MTU | IBV_QP_DEST_QPN |
                              IBV_QP_RQ_PSN | IBV_QP_MAX_DEST_RD_ATOMIC | IBV_QP_MIN_RNR_TIMER))
        DIE("RTR");
    memset(&a, 0, sizeof(a));
    a.qp_state = IBV_QPS_RTS;
    a.sq_psn = me.psn;
    a.timeout = 14;
    a.retry_cnt = 7;
    a.rnr_retry = 7;
    a.max_rd_atomic = 1;
    if (ibv_modify_qp(qp, &a, IBV_QP_STATE | IBV_QP_SQ_PSN | IBV_QP_TIMEOUT | IBV_QP_RETRY_CNT |
                              IBV_QP_RNR_RETRY | IBV_QP_MAX_QP_RD_ATOMIC))
        DIE("RTS");

    /* ---- the rcache module, through Open MPI's framework ---- */
    char name[64];
    snprintf(name, sizeof(name), "verbs.%s.%d", devname, rank);
    mca_rcache_base_resources_t res = {
        .cache_name = name, .reg_data = pd, .sizeof_reg = sizeof(struct vreg),
        .register_mem = verbs_register, .deregister_mem = verbs_deregister,
    };
    mca_rcache_base_module_t *rc = mca_rcache_base_module_create("vmtrack", NULL, &res);
    if (!rc)
        DIE("rank %d: mca_rcache_base_module_create(\"vmtrack\") failed", rank);

    const size_t len = 4u << 20, words = len / sizeof(uint64_t);
    uint64_t *buf = mmap(NULL, len, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (MAP_FAILED == buf)
        DIE("mmap");
    size_t bad = 0;
    int remaps = 0;
    for (int r = 0; r < rounds; r++) {
        if (r > 0 && 0 == r % 3) {
            munmap(buf, len);
            if (mmap(buf, len, PROT_READ | PROT_WRITE,
                     MAP_PRIVATE | MAP_ANONYMOUS | MAP_FIXED_NOREPLACE, -1, 0) != buf)
                DIE("rank %d: could not map the same address again", rank);
            remaps++;
        }
        uint64_t seed = 7u + (uint64_t) r;
        mca_rcache_base_registration_t *reg = NULL;
        if (1 == rank) {
            memset(buf, 0xee, len);
            if (OPAL_SUCCESS != rc->rcache_register(rc, buf, len, 0,
                                                    MCA_RCACHE_ACCESS_REMOTE_WRITE |
                                                        MCA_RCACHE_ACCESS_LOCAL_WRITE, &reg))
                DIE("register target");
            struct ibv_mr *mr = ((struct vreg *) reg)->mr;
            uint64_t info[2] = {(uintptr_t) buf, mr->rkey};
            MPI_Send(info, 2, MPI_UINT64_T, 0, r, MPI_COMM_WORLD);
            MPI_Recv(NULL, 0, MPI_BYTE, 0, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);  /* written */
            bad += bad_words(buf, words, seed);
        } else {
            uint64_t info[2];
            MPI_Recv(info, 2, MPI_UINT64_T, 1, r, MPI_COMM_WORLD, MPI_STATUS_IGNORE);
            fill(buf, words, seed);
            if (OPAL_SUCCESS != rc->rcache_register(rc, buf, len, 0, 0, &reg))
                DIE("register source");
            struct ibv_mr *mr = ((struct vreg *) reg)->mr;
            struct ibv_sge sge = {.addr = (uintptr_t) buf, .length = (uint32_t) len,
                                  .lkey = mr->lkey};
            struct ibv_send_wr wr = {.wr_id = (uint64_t) r, .sg_list = &sge, .num_sge = 1,
                                     .opcode = IBV_WR_RDMA_WRITE,
                                     .send_flags = IBV_SEND_SIGNALED}, *badwr = NULL;
            wr.wr.rdma.remote_addr = info[0];
            wr.wr.rdma.rkey = (uint32_t) info[1];
            if (ibv_post_send(qp, &wr, &badwr))
                DIE("post_send");
            struct ibv_wc wc;
            int n;
            while (0 == (n = ibv_poll_cq(cq, 1, &wc)))
                ;
            if (n < 0 || IBV_WC_SUCCESS != wc.status)
                DIE("RDMA WRITE completion: %s", n < 0 ? "poll failed" : ibv_wc_status_str(wc.status));
            MPI_Send(NULL, 0, MPI_BYTE, 1, r, MPI_COMM_WORLD);
        }
        rc->rcache_deregister(rc, reg);
    }
    struct vmt_stats s = {.sz = sizeof(s)};
    vmt_stats_get(vmt_shared(), &s);
    int unused = 0 == n_reg || 0 == s.hits;
    printf("rank %d: %d rounds of %zu MiB RDMA WRITE over %s, %d remaps, %zu wrong words; "
           "ibv_reg_mr %lu ibv_dereg_mr %lu; vmtrack (%s): hits %llu misses %llu "
           "invalidations %llu%s\n", rank, rounds, len >> 20, devname, remaps, bad, n_reg,
           n_dereg, vmt_cache_tracker(vmt_shared()), (unsigned long long) s.hits,
           (unsigned long long) s.misses, (unsigned long long) s.invalidations,
           unused ? "  <- vmtrack did not serve hits" : "");
    fflush(stdout);
    int mine = (bad || unused) ? 1 : 0, any = 0;
    MPI_Allreduce(&mine, &any, 1, MPI_INT, MPI_MAX, MPI_COMM_WORLD);
    mca_rcache_base_module_destroy(rc);
    ibv_destroy_qp(qp);
    ibv_destroy_cq(cq);
    ibv_dealloc_pd(pd);
    ibv_close_device(ctx);
    ibv_free_device_list(list);
    munmap(buf, len);
    MPI_Finalize();
    return any;
}
