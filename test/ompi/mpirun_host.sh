#!/bin/sh
# mpirun -np 2 --tune <vmtrack's settings file> (--mca rcache vmtrack, the component's
# directory, UCX's hook mode from the start) on this machine, with the shared-memory BTL (vader,
# 5.0's sm) and with --mca pml ucx: nothing else on the command line. Each rank (test/ompi/mpi_hooks_check) checks
# that vmtrack's hooks are the only patcher of libc's entries, that Open MPI's and UCX's event
# consumers see an munmap, and that messages over remapped buffers arrive intact. Also: no
# "leaves out grdma" warning where the parameter files already exclude btl ofi.
# Run by `make check` from the top build directory (root: --allow-run-as-root).
set -u
builddir=${VMT_BUILDDIR:-$(pwd)}
prog="$builddir/test/ompi/mpi_hooks_check"
command -v mpirun >/dev/null 2>&1 || { echo "SKIP: mpirun not found"; exit 77; }
[ -x "$prog" ] && [ -f "$builddir/.libs/mca_rcache_vmtrack.so" ] || { echo "FAIL: $prog or the component not built"; exit 1; }
if [ -e /dev/vmtrack ]; then
	echo "SKIP: vmtrack.ko is loaded here: kmod is the tracker, there is no takeover to check"
	exit 77
fi
. "$(dirname "$0")/ompi_env.sh"

fail=0
run() {  # run NAME MPIRUN-ARGS...: the job must pass; its output is shown
	name=$1; shift
	out=$(timeout 180 mpirun -np 2 --oversubscribe --tune "$tune" "$@" "$prog" 2>&1); rc=$?
	printf '%s\n' "$out" | sed "s/^/  [$name] /"
	if [ "$rc" -ne 0 ]; then echo "FAIL: $name: mpirun status $rc"; fail=1; return 1; fi
	n=$(printf '%s\n' "$out" | grep -c 'after the memory framework opened:.*munmap->libvmtrack')
	if [ "$n" -ne 2 ]; then echo "FAIL: $name: $n of 2 ranks report vmtrack's entries"; fail=1; return 1; fi
	echo "ok: $name"
}

run vader
if grep -qs '^ *btl *= *^.*ofi' /etc/openmpi/openmpi-mca-params.conf &&
	printf '%s\n' "$out" | grep -q 'leaves out grdma'; then
	echo "FAIL: vader: the \"btl ofi needs grdma\" warning although the parameter file excludes ofi"
	fail=1
fi

# 4.1: a DSO of its own; 5.0: built into libmpi
if [ -f "$sysdir/mca_pml_ucx.so" ] || ompi_info 2>/dev/null | grep -q 'MCA pml: ucx'; then
	# pml ucx declines shared-memory-only transports unless told (no RDMA device here): the
	# two pml_ucx_* settings are Open MPI's, not vmtrack's.
	if VMT_EXPECT_UCM_EVENTS=1 run ucx --mca pml ucx \
		--mca pml_ucx_tls any --mca pml_ucx_devices any --mca opal_common_ucx_verbose 1 \
		-x VMT_EXPECT_UCM_EVENTS; then
		if ! printf '%s\n' "$out" | grep -q 'using OPAL memory hooks as external events'; then
			echo "FAIL: ucx: UCX does not take Open MPI's memory events"; fail=1
		fi
		n=$(printf '%s\n' "$out" | grep -c "by ucm's VM_UNMAPPED handler [1-9]")
		[ "$n" -eq 2 ] || { echo "FAIL: ucx: $n of 2 ranks saw UCX's VM_UNMAPPED event"; fail=1; }
	fi
else
	echo "note: no pml ucx in this Open MPI: not checked"
fi
# MPI Sessions: three init/finalize cycles in each rank (the component loaded, taking over and
# unloaded each time); the program says SKIP where MPI has no Sessions (4.1).
sess="$builddir/test/ompi/mpi_sessions_check"
out=$(timeout 180 mpirun -np 2 --oversubscribe --tune "$tune" "$sess" 2>&1); rc=$?
printf '%s\n' "$out" | grep -v 'bad prefix\|pmix_mca_\|^ *or$' | sed "s/^/  [sessions] /"
if printf '%s\n' "$out" | grep -q '^SKIP'; then
	echo "note: sessions: not checked (no MPI Sessions in this Open MPI)"
elif [ "$rc" -ne 0 ] || [ "$(printf '%s\n' "$out" | grep -c 'session cycles, all right')" -ne 2 ]; then
	echo "FAIL: sessions: mpirun status $rc"; fail=1
else
	echo "ok: sessions"
fi
exit $fail
