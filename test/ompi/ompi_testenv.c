/* See ompi_testenv.h. */
#include "ompi_testenv.h"

#include <dlfcn.h>
#include <errno.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/stat.h>
#include <unistd.h>

#include <mpi.h>

#include "opal_config.h"
#include "opal/mca/base/base.h"
#include "opal/mca/rcache/base/base.h"

#include "ompi-rcache/ompi_compat.h"
#include "ompi-rcache/rcache_vmtrack.h"

#ifndef VMT_OMPI_BUILDDIR
#error "VMT_OMPI_BUILDDIR (the build tree's absolute path) must be defined"
#endif
#ifndef VMT_OMPI_SYSTEM_COMPONENTDIR
#error "VMT_OMPI_SYSTEM_COMPONENTDIR (ompi_info --path pkglibdir) must be defined"
#endif

static char comp_dir[PATH_MAX];

const char *vmt_ompi_test_component_dir(void)
{
    if (comp_dir[0])
        return comp_dir;
    char so[PATH_MAX], link[PATH_MAX + 64], tmp[PATH_MAX + 64];
    snprintf(comp_dir, sizeof(comp_dir), "%s/test/ompi/components", VMT_OMPI_BUILDDIR);
    snprintf(so, sizeof(so), "%s/.libs/mca_rcache_vmtrack.so", VMT_OMPI_BUILDDIR);
    snprintf(link, sizeof(link), "%s/mca_rcache_vmtrack.so", comp_dir);
    snprintf(tmp, sizeof(tmp), "%s/.mca_rcache_vmtrack.so.%ld", comp_dir, (long) getpid());
    if (0 != mkdir(comp_dir, 0755) && EEXIST != errno)
        fprintf(stderr, "mkdir %s: %s\n", comp_dir, strerror(errno));
    /* symlink + rename: atomic even when several tests start at once (make -j). */
    unlink(tmp);
    if (0 != symlink(so, tmp) || 0 != rename(tmp, link))
        fprintf(stderr, "linking %s: %s\n", link, strerror(errno));
    return comp_dir;
}

/* Open MPI 5 links UCX into libopen-pal: UCX is loaded, and patches libc unless told not to,
 * before main. A job using vmtrack starts with UCX_MEM_MMAP_HOOK_MODE=reloc (vmtrack's Open
 * MPI settings file, its modulefile); a test started by make without it starts again with it. */
static void start_with_ucx_mode(char **argv)
{
    void *ucs = dlopen("libucs.so.0", RTLD_NOW | RTLD_NOLOAD);
    if (NULL == ucs || getenv("UCX_MEM_MMAP_HOOK_MODE"))
        return;
    dlclose(ucs);
    setenv("UCX_MEM_MMAP_HOOK_MODE", "reloc", 1);
    fprintf(stderr, "UCX is loaded before main: starting again with UCX_MEM_MMAP_HOOK_MODE=reloc, "
            "as a job using vmtrack starts\n");
    execv("/proc/self/exe", argv);
    fprintf(stderr, "execv /proc/self/exe: %s\n", strerror(errno));
    exit(99);
}

int vmt_ompi_test_mpi_init(int *argc, char ***argv)
{
    start_with_ucx_mode(*argv);
    char path[2 * PATH_MAX + 2];
    snprintf(path, sizeof(path), "%s:%s", vmt_ompi_test_component_dir(),
             VMT_OMPI_SYSTEM_COMPONENTDIR);
    setenv("OMPI_MCA_mca_base_component_path", path, 0);
    setenv("OMPI_MCA_rcache", "vmtrack,grdma", 0);
    setenv("OMPI_MCA_pml", "ob1", 0);
    setenv("OMPI_MCA_btl", "self", 0);
    setenv("OMPI_MCA_osc", VMT_OMPI_OSC_WITHOUT_UCX, 0);
    setenv("OMPI_MCA_mtl", "^ofi,psm,psm2", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT", "1", 0);
    setenv("OMPI_ALLOW_RUN_AS_ROOT_CONFIRM", "1", 0);
    if (MPI_SUCCESS != MPI_Init(argc, argv)) {
        fprintf(stderr, "MPI_Init failed\n");
        return -1;
    }
    return 0;
}

struct mca_rcache_vmtrack_component_t *vmt_ompi_test_component(void)
{
    mca_base_component_list_item_t *cli;
    OPAL_LIST_FOREACH(cli, &opal_rcache_base_framework.framework_components,
                      mca_base_component_list_item_t) {
        if (0 == strcmp(cli->cli_component->mca_component_name, "vmtrack"))
            return (mca_rcache_vmtrack_component_t *) cli->cli_component;
    }
    return NULL;
}
