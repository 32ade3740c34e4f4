/* See ompi_provider.h. */
#include "ompi_provider.h"

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opal_config.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/mca/rcache/rcache.h"

#include "vmtrack.h"

/* The "BTL": an io_uring fixed-buffer slot per registration. */
struct oreg {
    mca_rcache_base_registration_t base;
    int slot;
};

struct oprov {
    struct scn_ring_table *table;
    mca_rcache_base_module_t *rcache;
};

static int ring_register(void *reg_data, void *base, size_t size,
                         mca_rcache_base_registration_t *reg)
{
    struct oreg *r = (struct oreg *) reg;
    int ret = scn_ring_slot_reg((struct scn_ring_table *) reg_data, base, size, &r->slot);
    if (-ENOSPC == ret || -ENOMEM == ret)
        return OPAL_ERR_OUT_OF_RESOURCE;
    return ret < 0 ? OPAL_ERROR : OPAL_SUCCESS;
}

static int ring_deregister(void *reg_data, mca_rcache_base_registration_t *reg)
{
    scn_ring_slot_dereg((struct scn_ring_table *) reg_data, ((struct oreg *) reg)->slot);
    return OPAL_SUCCESS;
}

static int setup_common(const char *component, void **ctx, struct io_uring *ring, char *why,
                        size_t whylen)
{
    struct oprov *p = calloc(1, sizeof(*p));
    if (!p)
        return -ENOMEM;
    int ret = scn_ring_table_create(ring, OMPI_PROVIDER_SLOTS, &p->table);
    if (ret < 0) {
        snprintf(why, whylen, "fixed-buffer table: %s", strerror(-ret));
        free(p);
        return ret;
    }
    mca_rcache_base_resources_t res = {
        .cache_name = "scn.iouring",
        .reg_data = p->table,
        .sizeof_reg = sizeof(struct oreg),
        .register_mem = ring_register,
        .deregister_mem = ring_deregister,
    };
    p->rcache = mca_rcache_base_module_create(component, NULL, &res);
    if (!p->rcache) {
        snprintf(why, whylen, "mca_rcache_base_module_create(\"%s\") refused (its reason is on "
                 "stderr)", component);
        scn_ring_table_destroy(p->table);
        free(p);
        return -ENOTSUP;
    }
    *ctx = p;
    return 0;
}

static void o_teardown(void *ctx);

static int vmtrack_setup(void **ctx, struct io_uring *ring, const char *variant, char *why,
                         size_t whylen)
{
    if (variant)
        setenv("VMTRACK_TRACKER", variant, 1);
    int ret = setup_common("vmtrack", ctx, ring, why, whylen);
    if (ret < 0)
        return ret;
    const char *in_use = vmt_cache_tracker(vmt_shared());
    if (variant && strcmp(variant, in_use) != 0) {
        snprintf(why, whylen, "asked for tracker %s, the shared cache has %s", variant, in_use);
        o_teardown(*ctx);
        *ctx = NULL;   /* the harness must not tear it down again */
        return -ENOTSUP;
    }
    return 0;
}

static int grdma_setup(void **ctx, struct io_uring *ring, const char *variant, char *why,
                       size_t whylen)
{
    (void) variant;
    return setup_common("grdma", ctx, ring, why, whylen);
}

static int o_get(void *ctx, void *addr, size_t len, int *fixed_index, void **token)
{
    struct oprov *p = ctx;
    mca_rcache_base_registration_t *reg = NULL;
    int rc = p->rcache->rcache_register(p->rcache, addr, len, 0, 0, &reg);
    if (OPAL_SUCCESS != rc)
        return OPAL_ERR_OUT_OF_RESOURCE == rc ? -ENOSPC : -EIO;
    *fixed_index = ((struct oreg *) reg)->slot;
    *token = reg;
    return 0;
}

static void o_put(void *ctx, void *token)
{
    struct oprov *p = ctx;
    p->rcache->rcache_deregister(p->rcache, (mca_rcache_base_registration_t *) token);
}

static void o_teardown(void *ctx)
{
    struct oprov *p = ctx;
    if (!p)
        return;
    mca_rcache_base_module_destroy(p->rcache);
    scn_ring_table_destroy(p->table);
    free(p);
}

const struct scn_provider scn_provider_ompi_vmtrack = {
    .name = "ompi-vmtrack",
    .setup = vmtrack_setup,
    .get = o_get,
    .put = o_put,
    .teardown = o_teardown,
    .fork_child = NULL,
};

const struct scn_provider scn_provider_ompi_grdma = {
    .name = "ompi-grdma",
    .setup = grdma_setup,
    .get = o_get,
    .put = o_put,
    .teardown = o_teardown,
    .fork_child = NULL,
};
