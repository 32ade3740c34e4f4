/* "grdma" served by vmtrack (Open MPI 5.0 and later).
 *
 * btl ofi, btl uct and smsc knem (and 6.0's mtl ofi) ask the rcache framework for "grdma" by
 * name. With "--mca rcache vmtrack" grdma is left out and they would fail (btl ofi aborts the
 * job, the others drop out), or, with "vmtrack,grdma", register on a cache of their own fed by
 * Open MPI's patcher. The framework finds a component by comparing names along its component
 * list, so the component appends an entry named "grdma" whose rcache_init is vmtrack's: their
 * registrations then go to vmtrack's one cache like every other.
 *
 * The entry is the framework's own kind of list item, so the framework's close releases it
 * with the rest. Its component is a heap copy of vmtrack's, renamed, with no open, close or
 * register function: the framework's close only reads its names (no "grdma" variable group
 * or repository entry exists when grdma is left out, and 5.0 builds grdma into libopen-pal),
 * and vmtrack's own entry, closed first, may unload this code before. The copy (a few hundred
 * bytes per open of the framework) is never freed: nothing says when the last reader is done.
 * The framework creates no module after its close, and finalizes the modules before it. */
#include "rcache_vmtrack.h"
#include "ompi_compat.h"

#if VMT_OMPI_SERVES_GRDMA

#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#include "opal/class/opal_list.h"
#include "opal/mca/base/base.h"
#include "opal/mca/rcache/base/base.h"
#include "opal/util/output.h"

#define C mca_rcache_vmtrack_component

static bool framework_has(const char *name)
{
    mca_base_component_list_item_t *cli;
    OPAL_LIST_FOREACH(cli, &opal_rcache_base_framework.framework_components,
                      mca_base_component_list_item_t) {
        if (0 == strcmp(cli->cli_component->mca_component_name, name))
            return true;
    }
    return false;
}

bool vmt_ompi_serve_grdma(void)
{
    if (framework_has("grdma"))
        return false;   /* grdma itself is selected: its users keep it */
    mca_rcache_base_component_t *copy = malloc(sizeof(*copy));
    mca_base_component_list_item_t *cli = OBJ_NEW(mca_base_component_list_item_t);
    if (NULL == copy || NULL == cli) {
        free(copy);
        if (cli)
            OBJ_RELEASE(cli);
        opal_output(0, "rcache vmtrack: out of memory serving \"grdma\": btl ofi, btl uct and "
                    "smsc knem cannot register memory in this process");
        return false;
    }
    memcpy(copy, &C.super, sizeof(*copy));
    mca_base_component_t *v = &copy->rcache_version;
    memset(v->mca_component_name, 0, sizeof(v->mca_component_name));
    snprintf(v->mca_component_name, sizeof(v->mca_component_name), "grdma");
    v->mca_open_component = NULL;
    v->mca_close_component = NULL;
    v->mca_query_component = NULL;
    v->mca_register_component_params = NULL;
    cli->cli_component = v;
    opal_list_append(&opal_rcache_base_framework.framework_components, &cli->super);
    return true;
}

#else

bool vmt_ompi_serve_grdma(void)
{
    return false;   /* 4.1: grdma is a DSO of its own; openib takes btl_openib_rcache */
}

#endif
