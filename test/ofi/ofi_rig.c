/* The libfabric rig (ofi_rig.h). */
#define _GNU_SOURCE
#include "ofi_rig.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/mman.h>
#include <time.h>

#include <rdma/fi_cm.h>
#include <rdma/fi_endpoint.h>
#include <rdma/fi_errno.h>
#include <rdma/fi_rma.h>

#define COMPLETION_TIMEOUT_S 20

const char *rig_provider(void)
{
    const char *p = getenv("VMT_OFI_PROV");
    return p && *p ? p : "verbs;ofi_rxm";
}

static int fail(char *why, size_t len, const char *what, int ret)
{
    snprintf(why, len, "%s: %s", what, fi_strerror(ret < 0 ? -ret : ret));
    return ret < 0 ? ret : -ret;
}

static int open_ep(struct ofi_rig *r, int i, char *why, size_t wl)
{
    struct fi_cq_attr cqa = {.format = FI_CQ_FORMAT_CONTEXT, .size = 64};
    int ret = fi_cq_open(r->dom, &cqa, &r->cq[i], NULL);
    if (ret)
        return fail(why, wl, "fi_cq_open", ret);
    ret = fi_endpoint(r->dom, r->info, &r->ep[i], NULL);
    if (ret)
        return fail(why, wl, "fi_endpoint", ret);
    if ((ret = fi_ep_bind(r->ep[i], &r->cq[i]->fid, FI_TRANSMIT | FI_RECV)) ||
        (ret = fi_ep_bind(r->ep[i], &r->av->fid, 0)) || (ret = fi_enable(r->ep[i])))
        return fail(why, wl, "endpoint bind/enable", ret);
    return 0;
}

int rig_open(struct ofi_rig *r, size_t tlen, char *why, size_t wl)
{
    memset(r, 0, sizeof(*r));
    /* rxm sizes its CQs by the universe: rxe's max_cqe is too small for the default 256. */
    setenv("FI_UNIVERSE_SIZE", "2", 0);
    struct fi_info *hints = fi_allocinfo();
    hints->fabric_attr->prov_name = strdup(rig_provider());
    hints->ep_attr->type = FI_EP_RDM;
    hints->caps = FI_MSG | FI_RMA;
    hints->mode = FI_CONTEXT;
    hints->domain_attr->mr_mode = FI_MR_LOCAL | FI_MR_VIRT_ADDR | FI_MR_ALLOCATED |
                                  FI_MR_PROV_KEY | FI_MR_ENDPOINT;
    hints->domain_attr->threading = FI_THREAD_SAFE;
    int ret = fi_getinfo(FI_VERSION(1, 13), NULL, NULL, 0, hints, &r->info);
    fi_freeinfo(hints);
    if (ret)
        return fail(why, wl, "fi_getinfo", ret);
    if ((ret = fi_fabric(r->info->fabric_attr, &r->fab, NULL)))
        return fail(why, wl, "fi_fabric", ret);
    if ((ret = fi_domain(r->fab, r->info, &r->dom, NULL)))
        return fail(why, wl, "fi_domain", ret);
    struct fi_av_attr ava = {.type = FI_AV_TABLE};
    if ((ret = fi_av_open(r->dom, &ava, &r->av, NULL)))
        return fail(why, wl, "fi_av_open", ret);
    for (int i = 0; i < 2; i++)
        if ((ret = open_ep(r, i, why, wl)))
            return ret;
    char name[256];
    size_t nlen = sizeof(name);
    if ((ret = fi_getname(&r->ep[1]->fid, name, &nlen)))
        return fail(why, wl, "fi_getname", ret);
    if (fi_av_insert(r->av, name, 1, &r->peer, 0, NULL) != 1)
        return fail(why, wl, "fi_av_insert", -FI_EINVAL);
    r->tlen = tlen;
    r->target = mmap(NULL, tlen, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
    if (r->target == MAP_FAILED)
        return fail(why, wl, "mmap target", -FI_ENOMEM);
    memset(r->target, 0, tlen);
    ret = fi_mr_reg(r->dom, r->target, tlen, FI_REMOTE_WRITE, 0, 0, 0, &r->tmr, NULL);
    if (ret)
        return fail(why, wl, "fi_mr_reg target", ret);
    if (r->info->domain_attr->mr_mode & FI_MR_ENDPOINT) {
        if ((ret = fi_mr_bind(r->tmr, &r->ep[1]->fid, 0)) || (ret = fi_mr_enable(r->tmr)))
            return fail(why, wl, "fi_mr_bind target", ret);
    }
    r->tkey = fi_mr_key(r->tmr);
    r->taddr = r->info->domain_attr->mr_mode & FI_MR_VIRT_ADDR ? (uintptr_t)r->target : 0;
    return 0;
}

void rig_close(struct ofi_rig *r)
{
    if (r->tmr)
        fi_close(&r->tmr->fid);
    for (int i = 0; i < 2; i++) {
        if (r->ep[i])
            fi_close(&r->ep[i]->fid);
        if (r->cq[i])
            fi_close(&r->cq[i]->fid);
    }
    if (r->av)
        fi_close(&r->av->fid);
    if (r->dom)
        fi_close(&r->dom->fid);   /* libfabric prints its "MR cache stats" here */
    if (r->fab)
        fi_close(&r->fab->fid);
    if (r->info)
        fi_freeinfo(r->info);
    if (r->target && r->target != MAP_FAILED)
        munmap(r->target, r->tlen);
    memset(r, 0, sizeof(*r));
}

static int wait_one(struct ofi_rig *r)
{
    struct fi_cq_entry e;
    time_t t0 = time(NULL);
    for (;;) {
        ssize_t n = fi_cq_read(r->cq[0], &e, 1);
        if (n == 1)
            return 0;
        if (n == -FI_EAVAIL) {
            struct fi_cq_err_entry err = {0};
            fi_cq_readerr(r->cq[0], &err, 0);
            return -(int)(err.err ? err.err : EIO);
        }
        if (n < 0 && n != -FI_EAGAIN)
            return (int)n;
        fi_cq_read(r->cq[1], &e, 0);   /* progress for the target side (rxm connects) */
        if (time(NULL) - t0 > COMPLETION_TIMEOUT_S)
            return -ETIMEDOUT;
    }
}

int rig_reg(struct ofi_rig *r, void *src, size_t len)
{
    struct fid_mr *mr;
    int ret = fi_mr_reg(r->dom, src, len, FI_WRITE, 0, 0, 0, &mr, NULL);
    if (ret)
        return ret;
    fi_close(&mr->fid);
    return 0;
}

int rig_put(struct ofi_rig *r, void *src, size_t len)
{
    struct fid_mr *mr;
    if (len > r->tlen)
        return -EINVAL;
    int ret = fi_mr_reg(r->dom, src, len, FI_WRITE, 0, 0, 0, &mr, NULL);
    if (ret)
        return ret;
    struct fi_context ctx;
    do {
        ret = (int)fi_write(r->ep[0], src, len, fi_mr_desc(mr), r->peer, r->taddr, r->tkey,
                            &ctx);
        if (ret == -FI_EAGAIN) {
            struct fi_cq_entry e;
            fi_cq_read(r->cq[0], &e, 0);
            fi_cq_read(r->cq[1], &e, 0);
        }
    } while (ret == -FI_EAGAIN);
    if (ret == 0)
        ret = wait_one(r);
    fi_close(&mr->fid);
    return ret;
}

static unsigned char byte_of(size_t i, unsigned round)
{
    return (unsigned char)((i * 131u + round * 7919u + (i >> 12) * 17u) ^ (round * 0x5bu));
}

void rig_fill(void *p, size_t len, unsigned round)
{
    unsigned char *b = p;
    for (size_t i = 0; i < len; i++)
        b[i] = byte_of(i, round);
}

int rig_holds(const void *p, size_t len, unsigned round)
{
    const unsigned char *b = p;
    for (size_t i = 0; i < len; i++)
        if (b[i] != byte_of(i, round))
            return 0;
    return 1;
}
