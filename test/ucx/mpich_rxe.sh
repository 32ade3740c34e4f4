#!/bin/bash
# A 2-rank MPICH job (Debian's mpich, ch4:ucx) over soft-RoCE in the guest rig (test/vm/run
# --rxe), on stock UCX and with libvmtrack-ucx. Under UCX 1.13 (Debian 12), where the module
# serves UCX's registration caches:
#  1. stock UCX (its own hooks), every kind of change: the stale bytes are shown, not judged;
#  2. the module with the kmod tracker, every kind of change, UCX_IB_FORK_INIT=n: 0 stale bytes
#     and that vmtrack cached the source and dropped it at every change asserted;
#  3. the same with UCX's default fork support: 0 stale bytes asserted, the caching shown (in
#     about half the runs here vmtrack serves the source uncached then: doc/ucx.md);
#  4. the module with the hooks tracker, libc's changes only (raw system calls are invisible to
#     hooks), UCX_IB_FORK_INIT=n: 0 stale bytes and the caching asserted.
# Under UCX 1.14 on (Debian 13: 1.18), where UCP's cache hits are inline in libucp, every run
# forces the zero-copy rendezvous (UCX_RNDV_SCHEME=get_zcopy: over rxe UCX 1.18 otherwise
# copies 1 MiB through bounce buffers and registers no user page) and the job asserts, from
# the module's count of UCT's registrations of its buffer, that the buffer was registered:
#  1. stock UCX (its own hooks), every kind of change: the stale bytes are shown, not judged;
#  2. the module with the kmod tracker, every kind of change: UCX gets no cache (UCP's hits
#     could not be checked), 0 stale bytes and a registration of the source every round;
#  4. the module with the hooks tracker, libc's changes only: UCP's cache fed by vmtrack,
#     0 stale bytes, the source registered at every change and cached in between.
# test/ucx/mpich_stale is the job: rank 0 sends 1 MiB (rendezvous, zero-copy over rc_verbs)
# from a buffer whose pages it replaces at the same address between rounds; rank 1 checks every
# byte; with the module it also checks that vmtrack registered every fresh set of pages.
# `make check-ucx-vm` runs it (VMT_UCX_VM=1); in plain `make check` it skips (status 77), as it
# does, saying why, when MPICH or the rig is missing. Inside the guest it runs itself again
# with --in-guest. MPICH's tools are called by their own names (mpiexec.mpich): `mpirun` is
# whichever MPI the system's alternatives select (Open MPI here).
set -u
builddir=${VMT_BUILDDIR:-$(pwd)}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
srcdir=$(cd "$here/../.." && pwd)
job=$builddir/test/ucx/mpich_stale
cost_job=$builddir/test/ucx/mpich_send_cost
module=$builddir/.libs/libvmtrack-ucx.so

skip() { echo "SKIP: $*"; exit 77; }

# mpiexec.mpich -n 2 on one node; $1 names the run, the rest go to the job.
run_job() {
	local name=$1
	shift
	echo "== $name"
	timeout 150 mpiexec.mpich -n 2 -launcher fork "$@"
	local rc=$?
	echo "== $name: exit $rc"
	return $rc
}

in_guest() {
	[ -e /sys/class/infiniband/rxe0 ] || { echo "SKIP: no rxe0 in the guest"; exit 77; }
	# UCX over rxe0 only: rc_verbs carries the data (zero-copy rendezvous), ud_verbs the
	# wire-up; GID index 0, as test_ucp_rxe explains. MPIR_CVAR_NOLOCAL: without it MPICH's
	# own shared memory carries messages between ranks of one node and UCX is never used.
	export UCX_TLS=rc_verbs,ud_verbs,self UCX_NET_DEVICES=rxe0:1 UCX_IB_GID_INDEX=0 \
		UCX_WARN_UNUSED_ENV_VARS=n MPIR_CVAR_NOLOCAL=1
	unset LD_PRELOAD
	local with=(-genv LD_PRELOAD "$module" -genv UCX_MEM_MMAP_HOOK_MODE none)
	local fail=0
	local release
	release=$(ucx_info -v 2>/dev/null | sed -n -e "s/^# Version //p" -e "s/^# Library version: //p")
	echo "UCX $release in the guest"
	case $release in
	1.13.*) ;;
	1.*) in_guest_fed; exit $? ;;
	*) echo "FAIL: cannot tell the guest's UCX release (ucx_info -v: '$release')"; exit 1 ;;
	esac
	run_job "stock UCX (shown, not judged)" -genv UCX_MEM_MMAP_HOOK_MODE bistro \
		"$job" --changes all || fail=1
	run_job "libvmtrack-ucx, kmod tracker" "${with[@]}" -genv VMTRACK_TRACKER kmod \
		-genv UCX_IB_FORK_INIT n "$job" --changes all --expect-vmtrack --expect-cached || fail=1
	run_job "libvmtrack-ucx, kmod tracker, UCX's fork support (caching shown)" "${with[@]}" \
		-genv VMTRACK_TRACKER kmod "$job" --changes all --expect-vmtrack || fail=1
	run_job "libvmtrack-ucx, hooks tracker" "${with[@]}" -genv VMTRACK_TRACKER hooks \
		-genv UCX_IB_FORK_INIT n "$job" --changes libc --expect-vmtrack --expect-cached || fail=1
	exit $fail
}

# UCX 1.14 on: zero-copy forced, registration asserted from UCT's count (the comment on top).
in_guest_fed() {
	local with=(-genv LD_PRELOAD "$module" -genv UCX_MEM_MMAP_HOOK_MODE none)
	local zcopy=(-genv UCX_RNDV_SCHEME get_zcopy)
	local fail=0
	run_job "stock UCX, zero-copy forced (shown, not judged)" "${zcopy[@]}" \
		-genv UCX_MEM_MMAP_HOOK_MODE bistro "$job" --changes all || fail=1
	run_job "libvmtrack-ucx, kmod tracker, zero-copy forced" "${with[@]}" "${zcopy[@]}" \
		-genv VMTRACK_TRACKER kmod "$job" --changes all --expect-vmtrack || fail=1
	run_job "libvmtrack-ucx, hooks tracker, zero-copy forced" "${with[@]}" "${zcopy[@]}" \
		-genv VMTRACK_TRACKER hooks "$job" --changes libc --expect-vmtrack --expect-cached ||
		fail=1
	send_costs "${with[@]}" "${zcopy[@]}"
	return $fail
}

# A zero-copy send's cost (one buffer, pages unchanged) on stock UCX and with the module, the
# ratios and UCT's registrations per send: printed, not judged (an emulated guest); a run that
# fails is reported as not measured.
send_costs() {
	[ -x "$cost_job" ] || { echo "send cost: NOT MEASURED, $cost_job not built"; return; }
	local stock=/tmp/vmt_cost_stock.$$ kmod=/tmp/vmt_cost_kmod.$$ hooks=/tmp/vmt_cost_hooks.$$
	local zcopy=(-genv UCX_RNDV_SCHEME get_zcopy)
	local rc=0
	run_job "send cost, stock UCX" "${zcopy[@]}" -genv UCX_MEM_MMAP_HOOK_MODE bistro \
		"$cost_job" --iters 5 >"$stock" || rc=1
	cat "$stock"
	run_job "send cost, libvmtrack-ucx, kmod tracker" "$@" -genv VMTRACK_TRACKER kmod \
		"$cost_job" --iters 5 >"$kmod" || rc=1
	cat "$kmod"
	run_job "send cost, libvmtrack-ucx, hooks tracker" "$@" -genv VMTRACK_TRACKER hooks \
		"$cost_job" --iters 5 >"$hooks" || rc=1
	cat "$hooks"
	if [ $rc != 0 ]; then
		echo "send cost: NOT MEASURED, a run failed (above)"
		rm -f "$stock" "$kmod" "$hooks"
		return
	fi
	echo "== zero-copy send cost against stock UCX (UCT registrations of the buffer per send)"
	awk 'FNR == 1 { f++ } $1 == "cost" { us[f, $2] = $3; regs[f, $2] = $4; sizes[$2] = 1 }
	     END { for (s in sizes) printf "%8d B: kmod %.2fx (%s regs/send), hooks %.2fx (%s regs/send), stock %.1f us\n",
	           s, us[2, s] / us[1, s], regs[2, s], us[3, s] / us[1, s], regs[3, s], us[1, s] }' \
		"$stock" "$kmod" "$hooks" | sort -n
	rm -f "$stock" "$kmod" "$hooks"
}

if [ "${1:-}" = --in-guest ]; then
	in_guest
fi

command -v mpiexec.mpich >/dev/null 2>&1 ||
	skip "mpiexec.mpich not found (Debian's mpich package is not installed)"
[ -x "$job" ] || skip "$job not built (configure found no mpicc.mpich: install libmpich-dev)"
[ -e "$module" ] || skip "$module not built (no UCX)"
[ -x "$srcdir/test/vm/run" ] || skip "no guest rig (test/vm/run)"
command -v qemu-system-x86_64 >/dev/null 2>&1 || skip "qemu-system-x86_64 not installed"
[ "${VMT_UCX_VM:-0}" = 1 ] || skip "boots a guest (~1 min): run 'make check-ucx-vm' (or set VMT_UCX_VM=1)"
"$srcdir/test/vm/run" --rxe --timeout 480 --share "$builddir" -- \
	env VMT_BUILDDIR="$builddir" bash "$here/mpich_rxe.sh" --in-guest
rc=$?
case $rc in
124) echo "FAIL: the guest timed out" ;;
125|126) skip "the guest rig failed (status $rc)" ;;
esac
exit $rc
