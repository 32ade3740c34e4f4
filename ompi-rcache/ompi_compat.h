/* What differs between the Open MPI releases the vmtrack rcache component builds against
 * (4.1, 5.0, 6.0): the one place the component looks at OPAL_*_VERSION. An unknown release is
 * refused at build time; at load the release the process runs is compared with this one
 * (ompi_release.h). */
#ifndef OMPI_RCACHE_VMTRACK_COMPAT_H
#define OMPI_RCACHE_VMTRACK_COMPAT_H

#include "opal_config.h"

#include "opal/mca/rcache/base/base.h"

#define VMT_OMPI_RELEASE_AT_LEAST(a, b, c)                                                    \
    (OPAL_MAJOR_VERSION * 10000 + OPAL_MINOR_VERSION * 100 + OPAL_RELEASE_VERSION >=          \
     (a) * 10000 + (b) * 100 + (c))

#if !((4 == OPAL_MAJOR_VERSION && 1 == OPAL_MINOR_VERSION) ||                                 \
      (5 == OPAL_MAJOR_VERSION && 0 == OPAL_MINOR_VERSION) ||                                 \
      (6 == OPAL_MAJOR_VERSION && 0 == OPAL_MINOR_VERSION))
#error "the vmtrack rcache component knows Open MPI 4.1, 5.0 and 6.0, not this release"
#endif

/* The release built against, as opal_version_string spells the running one. */
#define VMT_OMPI_BUILT_RELEASE OPAL_IDENT_STRING

/* Since 5.0.2 and 4.1.7 a module's lock is constructed by the base (grdma does it). */
#if VMT_OMPI_RELEASE_AT_LEAST(5, 0, 2) || (4 == OPAL_MAJOR_VERSION && OPAL_RELEASE_VERSION >= 7)
#define vmt_ompi_module_base_init(m) mca_rcache_base_module_init(m)
#define vmt_ompi_module_base_fini(m) mca_rcache_base_module_fini(m)
#else
#define vmt_ompi_module_base_init(m) ((void) (m))
#define vmt_ompi_module_base_fini(m) ((void) (m))
#endif

/* The components that ask the rcache framework for "grdma" by name, hard-coded, and how the
 * component answers a selection that leaves grdma out:
 *  - 4.1: btl ofi, btl uct, btl vader with knem (each a DSO of its own); openib asks for
 *    btl_openib_rcache, which the component points at vmtrack. It warns for the others.
 *  - 5.0, 6.0: btl ofi, btl uct, smsc knem (6.0's mtl ofi too), built into libopen-pal and
 *    libmpi; grdma is built in too, so a "grdma" entry served by vmtrack can stand in the
 *    framework's component list (rcache_vmtrack_grdma.c). */
#if OPAL_MAJOR_VERSION >= 5
#define VMT_OMPI_SERVES_GRDMA 1
#define VMT_OMPI_HAS_OPENIB 0
#else
#define VMT_OMPI_SERVES_GRDMA 0
#define VMT_OMPI_HAS_OPENIB 1
#endif

/* A one-sided component selection that keeps osc ucx (and the UCX it initialises) out of a
 * test process: 4.1's pt2pt; 5.0 removed pt2pt. */
#if OPAL_MAJOR_VERSION >= 5
#define VMT_OMPI_OSC_WITHOUT_UCX "^ucx"
#else
#define VMT_OMPI_OSC_WITHOUT_UCX "pt2pt"
#endif

struct vmt_ompi_grdma_user {
    const char *framework; /* "btl", "smsc" */
    const char *name;
    const char *device;    /* only used when this exists ("/dev/knem"); NULL: always */
    const char *dso;       /* 4.1: the component's own DSO, absent when not installed */
};

static const struct vmt_ompi_grdma_user vmt_ompi_grdma_users[] = {
#if OPAL_MAJOR_VERSION >= 5
    {"btl", "ofi", NULL, NULL},
    {"btl", "uct", NULL, NULL},
    {"smsc", "knem", "/dev/knem", NULL},
#else
    {"btl", "ofi", NULL, "mca_btl_ofi.so"},
    {"btl", "uct", NULL, "mca_btl_uct.so"},
    {"btl", "vader", "/dev/knem", "mca_btl_vader.so"},
#endif
};

#endif
