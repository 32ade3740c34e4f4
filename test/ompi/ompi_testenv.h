/* Shared setup of the Open MPI component tests: load mca_rcache_vmtrack.so from the build tree
 * (OMPI_MCA_mca_base_component_path), choose it by name next to grdma (--mca rcache
 * vmtrack,grdma: the default mode, where vmtrack's hooks take over from Open MPI's patcher unless
 * the caller's environment opts out), keep the job small (pml ob1, btl self: nothing that brings
 * UCX's own memory hooks), allow running as root, then MPI_Init as a singleton. */
#ifndef VMTRACK_TEST_OMPI_TESTENV_H
#define VMTRACK_TEST_OMPI_TESTENV_H

#include <stddef.h>

/* Sets the environment (never overriding what the caller already set) and calls MPI_Init.
 * 0, or -1 with a message on stderr. */
int vmt_ompi_test_mpi_init(int *argc, char ***argv);

/* Directory holding only mca_rcache_vmtrack.so (a symlink into the build tree's .libs), so
 * Open MPI does not see the component twice through the .la file. */
const char *vmt_ompi_test_component_dir(void);

/* The component as loaded by Open MPI (after MPI_Init), to read its decisions; NULL if the
 * rcache framework does not list it. */
struct mca_rcache_vmtrack_component_t;
struct mca_rcache_vmtrack_component_t *vmt_ompi_test_component(void);

#endif
