/* UCT's registrations, counted (uct_witness.c). */
#ifndef VMTRACK_UCX_UCT_WITNESS_H
#define VMTRACK_UCX_UCT_WITNESS_H

#include <stdint.h>

/* Registrations UCT made since the start, and those covering the range vmt_ucx_witness()
 * named since it was named. */
void ucx_witness_counts(uint64_t *all, uint64_t *covering);

#endif
