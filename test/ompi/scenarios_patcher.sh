#!/bin/sh
# The Open MPI scenario suite and stress in the opted-out mode: --mca memory patcher keeps Open
# MPI's patcher, vmtrack runs as before the takeover (tracker none fed by the patcher, hooks
# refused). Run by `make check` from the top build directory.
builddir=${VMT_BUILDDIR:-$(pwd)}
OMPI_MCA_memory=patcher exec "$builddir/test/ompi/test_ompi_scenarios"
