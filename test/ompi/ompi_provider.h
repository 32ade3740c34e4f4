/* Scenario-suite providers (tools/scenarios/scenario.h) that register through Open MPI's rcache
 * framework: mca_rcache_base_module_create("vmtrack" or "grdma") with a register_mem that puts
 * the buffer into a slot of the ring's io_uring fixed-buffer table. MPI_Init must have run.
 *
 * scn_provider_ompi_vmtrack: variant = vmtrack tracker for the process-wide cache
 * (VMTRACK_TRACKER: "kmod", "none" = fed by Open MPI's memory hooks, "pass", ...; NULL = the
 * component's choice, rcache_vmtrack_tracker=auto). scn_provider_ompi_grdma: variant ignored. */
#ifndef VMTRACK_TEST_OMPI_PROVIDER_H
#define VMTRACK_TEST_OMPI_PROVIDER_H
#include "scenarios/scenario.h"

extern const struct scn_provider scn_provider_ompi_vmtrack;
extern const struct scn_provider scn_provider_ompi_grdma;

/* Fixed-buffer table slots each provider creates on the ring. */
#define OMPI_PROVIDER_SLOTS 1024u

#endif
