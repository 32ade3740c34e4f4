#!/bin/bash
# mpirun -np 2 on soft-RoCE (rdma_rxe) in the guest rig (test/vm/run --rxe), with
# registrations through Open MPI's rcache framework, module vmtrack, and vmtrack.ko as tracker:
#  - through the openib BTL (--mca btl_openib_rcache vmtrack) running test/ompi/mpi_rdma_check,
#    when this Open MPI's openib can connect over RoCE (it needs the rdmacm connection manager;
#    Debian's 4.1.4 builds only udcm, which is InfiniBand-only);
#  - otherwise test/ompi/mpi_verbs_rdma: RDMA WRITEs over rxe0 between the two ranks with memory
#    registered by the framework's vmtrack module (ibv_reg_mr in register_mem, as openib does),
#    MPI carrying only control messages.
# Both move 4 MiB buffers, unmap and map them again at the same address every third round,
# check every byte, and check that vmtrack served the registrations.
# Then, on both, Open MPI over libfabric's verbs;ofi_rxm (mtl ofi, btl ofi: test/ompi/ofi_jobs.sh;
# VMT_OMPI_JOBS=ofi runs only those).
# `make check-ompi-vm` runs it (VMT_OMPI_VM=1); in plain `make check` it skips (status 77), as
# it does, saying why, when the rig cannot run. Inside the guest it runs itself again with
# --in-guest.
set -u
builddir=${VMT_BUILDDIR:-$(pwd)}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
srcdir=$(cd "$here/../.." && pwd)

skip() { echo "SKIP: $*"; exit 77; }

openib_cpcs() {
	ompi_info --param btl openib --level 9 2>/dev/null |
		sed -n '/btl_openib_cpc_include/{n;s/.*(valid values: \(.*\))/\1/p;}' | head -n1
}

# Open MPI 5 (no openib; pml ucx over rxe0): test/ompi/ompi_stale, rank 0 sending 1 MiB
# zero-copy (UCX_RNDV_SCHEME=get_zcopy: the peer reads the registered source pages) from a
# buffer whose pages it replaces between rounds, through libc and with raw system calls.
# pml ucx registers through UCX's own cache, which hears vmtrack only through vmtrack's UCX
# module: with the module, 0 stale bytes and vmtrack's registration of every fresh set of
# pages are asserted; without it the job's bytes are shown, stock and with the component.
ucx_jobs() {
	local ucx=(--mca pml ucx --mca osc ^ucx -x UCX_TLS=rc_verbs,ud_verbs,self
		-x UCX_NET_DEVICES=rxe0:1 -x UCX_IB_GID_INDEX=0 -x UCX_RNDV_SCHEME=get_zcopy
		-x UCX_WARN_UNUSED_ENV_VARS=n)
	local job=$builddir/test/ompi/ompi_stale module=$builddir/.libs/libvmtrack-ucx.so fail=0 out
	echo "== stock Open MPI (stale bytes shown; that there are any is asserted: zero-copy)"
	out=$(env -u OMPI_MCA_mca_base_component_path timeout 200 mpirun --allow-run-as-root -np 2 \
		"${ucx[@]}" "$job" --changes all 2>&1) || fail=1
	printf '%s\n' "$out"
	# Only registered pages can be stale: none would mean UCX copied through bounce buffers
	# and the job below would prove nothing.
	if ! printf '%s\n' "$out" | grep -q 'raw munmap+mmap .* [1-9][0-9]* stale bytes'; then
		echo "FAIL: stock: no stale byte after a raw change: the source was not sent zero-copy"
		fail=1
	fi
	echo "== --tune openmpi-vmtrack.tune (rcache vmtrack, kmod tracker)"
	if [ -e "$module" ]; then
		timeout 200 mpirun --allow-run-as-root -np 2 --tune "$tune" "${ucx[@]}" \
			-x LD_PRELOAD="$module" -x VMTRACK_TRACKER=kmod -x UCX_IB_FORK_INIT=n \
			--mca rcache_vmtrack_verbose 10 "$job" --changes all --expect-vmtrack || fail=1
	else
		echo "note: no $module (UCX module not built): UCX's cache does not hear vmtrack," \
			"the bytes are shown"
		timeout 200 mpirun --allow-run-as-root -np 2 --tune "$tune" "${ucx[@]}" \
			--mca rcache_vmtrack_verbose 10 "$job" --changes all || fail=1
	fi
	return $fail
}

# Open MPI 5, btl uct over rxe0 (pml ob1): btl uct asks the rcache framework for "grdma" by
# name; with the tune file (--mca rcache vmtrack) vmtrack serves it. test/ompi/mpi_rdma_check
# moves 4 MiB messages over buffers unmapped and mapped again, checks every byte, and checks
# that vmtrack's shared cache did the registering (registrations and hits).
uct_job() {
	echo "== btl uct on rxe0 through \"grdma\" served by vmtrack (kmod tracker)"
	timeout 300 mpirun --allow-run-as-root -np 2 --tune "$tune" --mca pml ob1 \
		--mca btl uct,self --mca btl_uct_memory_domains rxe0 --mca btl_uct_transports any \
		--mca osc ^ucx --mca mpi_leave_pinned 1 --mca rcache_vmtrack_print_stats 1 \
		--mca rcache_vmtrack_verbose 10 -x UCX_IB_GID_INDEX=0 \
		"$builddir/test/ompi/mpi_rdma_check" 24
}

if [ "${1:-}" = --in-guest ]; then
	ip addr add 10.77.0.1/24 dev vmt0 2>/dev/null
	ip link set vmt0 up
	sleep 1   # rxe adds the address's GIDs
	. "$here/ompi_env.sh"
	. "$here/ofi_jobs.sh"
	common=(--allow-run-as-root -np 2 -x LD_LIBRARY_PATH
		--mca mca_base_component_path "$comp:$sysdir"
		--mca pml ob1 --mca mpi_leave_pinned 1 --mca rcache_vmtrack_print_stats 1)
	fail=0
	if [ "${VMT_OMPI_JOBS:-all}" = ofi ]; then
		:   # only the libfabric jobs (a developer's shortcut)
	elif ! ompi_info 2>/dev/null | grep -q 'MCA btl: openib'; then
		ucx_jobs || fail=1
		uct_job || fail=1
	else
		case $(openib_cpcs) in
		*rdmacm*)
			timeout 400 mpirun "${common[@]}" --mca btl openib,self \
				--mca btl_openib_rcache vmtrack --mca btl_openib_cpc_include rdmacm \
				--mca btl_openib_warn_no_device_params_found 0 \
				"$builddir/test/ompi/mpi_rdma_check" 24 || fail=1
			;;
		*)
			echo "openib here offers only '$(openib_cpcs)' (InfiniBand-only): running the verbs job"
			timeout 400 mpirun "${common[@]}" --mca btl self,vader \
				"$builddir/test/ompi/mpi_verbs_rdma" 12 rxe0 || fail=1
			;;
		esac
	fi
	ofi_jobs || fail=1
	exit $fail
fi

command -v ompi_info >/dev/null 2>&1 || skip "ompi_info not found"
[ -x "$srcdir/test/vm/run" ] || skip "no guest rig (test/vm/run)"
command -v qemu-system-x86_64 >/dev/null 2>&1 || skip "qemu-system-x86_64 not installed"
[ "${VMT_OMPI_VM:-0}" = 1 ] || skip "boots a guest (~2.5 min): run 'make check-ompi-vm' (or set VMT_OMPI_VM=1)"
# the component directory the job loads from (see test/ompi/ompi_testenv.c)
mkdir -p "$builddir/test/ompi/components"
ln -sf "$builddir/.libs/mca_rcache_vmtrack.so" "$builddir/test/ompi/components/.vmt.$$" &&
	mv -f "$builddir/test/ompi/components/.vmt.$$" "$builddir/test/ompi/components/mca_rcache_vmtrack.so"
out=$("$srcdir/test/vm/run" --rxe --timeout 900 --share "$builddir" -- \
	env VMT_BUILDDIR="$builddir" bash "$here/mpirun_rxe.sh" --in-guest 2>&1)
rc=$?
printf '%s\n' "$out" | grep -v '^vmtrack: warning: VMTRACK_.* is not a variable'
case $rc in
124|125|126) skip "the guest rig failed (status $rc)" ;;
77) skip "no rxe0 in the guest" ;;
esac
exit $rc
