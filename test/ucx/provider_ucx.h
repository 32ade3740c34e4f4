/* The "ucx-rcache" scenario provider (provider_ucx.c): UCX's ucs_rcache with io_uring
 * fixed-buffer registrations. */
#ifndef VMTRACK_TEST_PROVIDER_UCX_H
#define VMTRACK_TEST_PROVIDER_UCX_H
#include <stddef.h>
#include "scenarios/scenario.h"

extern const struct scn_provider scn_provider_ucx;

/* Is libvmtrack-ucx loaded and feeding UCX? Its mode (0 off, 1 hooks, 2 watch) or -1 when it
 * is not loaded; tracker and why filled either way. */
int ucx_module_state(char *tracker, size_t tlen, char *why, size_t wlen);
#endif
