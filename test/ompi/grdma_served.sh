#!/bin/sh
# "grdma" asked for by name (what btl ofi, btl uct and smsc knem do) with --mca rcache vmtrack,
# which leaves grdma out: on Open MPI 5.0 and later vmtrack serves it on its one cache, on 4.1
# nobody does, nor with rcache_vmtrack_serve_grdma false (test_ompi_framework's case "grdma",
# here with that selection).
# Run by `make check` from the top build directory.
builddir=${VMT_BUILDDIR:-$(pwd)}
OMPI_MCA_rcache=vmtrack CK_RUN_CASE=grdma "$builddir/test/ompi/test_ompi_framework" || exit 1
# ... and nobody when told not to
OMPI_MCA_rcache=vmtrack OMPI_MCA_rcache_vmtrack_serve_grdma=0 CK_RUN_CASE=grdma \
	exec "$builddir/test/ompi/test_ompi_framework"
