/* A libfabric RDMA rig for the tests: one verbs;ofi_rxm domain (whose MR cache is the thing
 * under test), two RDM endpoints in this process, a target buffer registered once on the
 * second; rig_put registers a source buffer through fi_mr_reg (the cache), RDMA-writes it
 * into the target and waits for the completion. */
#ifndef VMTRACK_TEST_OFI_RIG_H
#define VMTRACK_TEST_OFI_RIG_H

#include <stddef.h>
#include <stdint.h>

#include <rdma/fabric.h>
#include <rdma/fi_domain.h>

struct ofi_rig {
    struct fi_info *info;
    struct fid_fabric *fab;
    struct fid_domain *dom;
    struct fid_av *av;
    struct fid_ep *ep[2];
    struct fid_cq *cq[2];
    fi_addr_t peer;            /* ep[1] as seen from ep[0] */
    void *target;
    size_t tlen;
    struct fid_mr *tmr;
    uint64_t tkey, taddr;
};

/* The provider; "verbs;ofi_rxm" unless VMT_OFI_PROV says otherwise. */
const char *rig_provider(void);
/* 0, or a negative FI errno with why filled (-FI_ENODATA: no such provider here). */
int  rig_open(struct ofi_rig *r, size_t tlen, char *why, size_t whylen);
void rig_close(struct ofi_rig *r);
/* fi_mr_reg(src, len) + fi_write into the target + completion + fi_close(mr). 0 or -errno. */
int  rig_put(struct ofi_rig *r, void *src, size_t len);
/* fi_mr_reg + fi_close only (the registration path, no transfer). */
int  rig_reg(struct ofi_rig *r, void *src, size_t len);

/* Fill `len` bytes with the pattern of `round` (different for every round). */
void rig_fill(void *p, size_t len, unsigned round);
/* Does p hold the pattern of `round`? */
int  rig_holds(const void *p, size_t len, unsigned round);

#endif
