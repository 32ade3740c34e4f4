#!/bin/bash
# mpirun -np 2 through a registering BTL (openib) on soft-RoCE (rdma_rxe) in the guest rig,
# with the vmtrack rcache: test/ompi/mpi_rdma_check moves 4 MiB messages both ways while the
# buffers are unmapped and mapped again, checks every byte, and checks that vmtrack's cache did
# the registering. Run by `make check` from the top build directory; inside the guest it is
# run again with --in-guest.
#
# Skips (77) with the reason when it cannot run here: no guest rig, or an Open MPI whose openib
# BTL cannot connect over RoCE (Debian's 4.1.4 builds only the udcm connection manager, which
# is InfiniBand-only; RoCE needs rdmacm).
set -u
builddir=${VMT_BUILDDIR:-$(pwd)}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
srcdir=$(cd "$here/../.." && pwd)

skip() { echo "SKIP: $*"; exit 77; }

if [ "${1:-}" = --in-guest ]; then
	ip addr add 10.77.0.1/24 dev vmt0 2>/dev/null
	ip link set vmt0 up
	sysdir=$(ompi_info --path pkglibdir --parsable | sed -n 's/^path:pkglibdir://p')
	export LD_LIBRARY_PATH="$builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
	set -x
	timeout 400 mpirun --allow-run-as-root -np 2 -x LD_LIBRARY_PATH \
		--mca mca_base_component_path "$builddir/test/ompi/components:$sysdir" \
		--mca pml ob1 --mca btl openib,self --mca btl_openib_rcache vmtrack \
		--mca btl_openib_cpc_include rdmacm --mca btl_openib_warn_no_device_params_found 0 \
		--mca mpi_leave_pinned 1 --mca rcache_vmtrack_print_stats 1 \
		"$builddir/test/ompi/mpi_rdma_check" 24
	exit $?
fi

command -v ompi_info >/dev/null 2>&1 || skip "ompi_info not found"
cpcs=$(ompi_info --param btl openib --level 9 2>/dev/null | sed -n 's/.*btl_openib_cpc_include.*//; s/.*(valid values: \(.*\))/\1/p' | head -n1)
case $cpcs in
*rdmacm*) ;;
'') skip "Open MPI has no openib BTL here (ompi_info --param btl openib shows nothing)" ;;
*) skip "Open MPI's openib BTL here offers only the connection manager(s) '$cpcs'; udcm is InfiniBand-only and RoCE (rdma_rxe) needs rdmacm, which this build lacks, so no registering BTL can connect over soft-RoCE. (test/ompi/test_ompi_framework and test_ompi_scenarios drive the component through the framework instead.)" ;;
esac
[ -x "$srcdir/test/vm/run" ] || skip "no guest rig (test/vm/run)"
command -v qemu-system-x86_64 >/dev/null 2>&1 || skip "qemu-system-x86_64 not installed"
# the component directory the job loads from (see test/ompi/ompi_testenv.c)
mkdir -p "$builddir/test/ompi/components"
ln -sf "$builddir/.libs/mca_rcache_vmtrack.so" "$builddir/test/ompi/components/mca_rcache_vmtrack.so"
"$srcdir/test/vm/run" --rxe --timeout 560 --share "$builddir" -- \
	env VMT_BUILDDIR="$builddir" bash "$here/mpirun_rxe.sh" --in-guest
rc=$?
case $rc in
124|125|126) skip "the guest rig failed (status $rc)" ;;
esac
exit $rc
