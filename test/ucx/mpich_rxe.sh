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
# copies 1 MiB through bounce buffers and registers no user page), shows the protocols UCX
# chose (UCX_PROTO_INFO=y) and the job asserts, from the module's count of UCT's registrations
# of its buffer per round, that the buffer was registered after every change:
#  1. stock UCX (its own hooks), every kind of change: the stale bytes are shown, not judged;
#  2. the module with the kmod tracker, every kind of change: UCP's own cache, its regions
#     watched and every hit checked (ucs_pgtable_lookup): 0 stale bytes, the source
#     registered after every change and in no round whose pages were kept (cache hits);
#  3. the module with the hooks tracker, libc's changes only: UCP's cache fed by vmtrack,
#     0 stale bytes, the source registered after every change and cached in between.
# test/ucx/mpich_stale is the job: rank 0 sends 1 MiB (rendezvous, zero-copy over rc_verbs)
# from a buffer whose pages it replaces at the same address between rounds; rank 1 checks every
# byte; with the module it also checks that vmtrack registered every fresh set of pages.
# `make check-ucx-vm` runs it (VMT_UCX_VM=1); in plain `make check` it skips (status 77), as it
# does, saying why, when MPICH or the rig is missing. Inside the guest it runs itself again
# with --in-guest. MPICH's tools are called by their own names (mpiexec.mpich): `mpirun` is
# whichever MPI the system's alternatives select (Open MPI here). A job that has not exited
# after VMT_MPICH_TIMEOUT seconds (150) is killed after its ranks' stacks are printed (gdb where
# installed). VMT_MPICH_REPEAT=N (UCX 1.14 on) runs only the stock and kmod runs, N times each.
set -u
builddir=${VMT_BUILDDIR:-$(pwd)}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
srcdir=$(cd "$here/../.." && pwd)
job=$builddir/test/ucx/mpich_stale
cost_job=$builddir/test/ucx/mpich_send_cost
module=$builddir/.libs/libvmtrack-ucx.so

skip() { echo "SKIP: $*"; exit 77; }

# UCX_PROTO_INFO=y's tables (UCX 1.14 on), cut down to what UCX chose for the job's sends:
# the rows (size range, protocol, lanes) of the "tagged message by ucp_tag_send*... from host
# memory" tables, once per kind of peer (self, intra-node, inter-node) and send variant.
proto_summary() {
	awk -F'|' 'NF < 3 { next }
	     $2 ~ /cfg#/ { keep = $3 ~ /tagged message by ucp_tag_send\*.* from host memory/
	                   peer = $2; sub(/^ *ucp_context_[0-9]+ /, "", peer); sub(/ cfg#.*/, "", peer)
	                   variant = $3; sub(/^.*ucp_tag_send\*/, "", variant); sub(/ from host.*/, "", variant)
	                   next }
	     keep && $2 ~ /\.\./ { row = sprintf("%s send%s %s: %s (%s)", peer, variant, $2, $3, $4); sub(/ +:/, ":", row)
	                            gsub(/  +/, " ", row); gsub(/ \)/, ")", row); gsub(/\( /, "(", row)
	                            if (!seen[row]++) print "  " row }' "$1" | sort
}

# UCX 1.18.1's libuct_ib aborts now and then in its async thread while the job's connections
# close (ib_device.c:210, an IB async event handled twice: UCX issue 10432), with the module
# and without it. A run whose job printed its verdict ("verdict: pass", after the ranks'
# results were combined and before MPI_Finalize) and then hit only that abort keeps its verdict.
teardown_abort_only() {
	grep -q 'verdict: pass' "$1" && grep -q 'ib_device.c:210  Assertion' "$1" &&
		! grep -q 'verdict: fail' "$1"
}

# A run whose job printed its verdict and then did not exit: MPICH's MPI_Finalize over UCX 1.18
# and rxe hangs now and then with the kmod tracker, one rank spinning in ucp_worker_progress
# for an endpoint close after the other rank exited (doc/ucx.md, known limits). Cause not
# known; the verdict was taken before it.
teardown_hang_only() {
	[ "$2" = 124 ] && grep -q 'verdict: pass' "$1" && ! grep -q 'verdict: fail' "$1"
}

# The processes under $1 (pid first): parents before their children.
descendants() {
	local p=$1 f line rest c
	echo "$p"
	for f in /proc/[0-9]*/stat; do
		read -r line <"$f" 2>/dev/null || continue
		rest=${line##*) }
		set -- $rest
		[ "$2" = "$p" ] || continue
		c=${f#/proc/}
		descendants "${c%/stat}"
	done
}

# What every rank of a job that did not exit is doing: each thread's kernel stack and wait
# channel, and with gdb (where installed) every thread's user stack, 60 s at most per rank.
dump_hung() {
	local pid exe t
	for pid in $(descendants "$1"); do
		exe=$(readlink "/proc/$pid/exe" 2>/dev/null) || continue
		case ${exe##*/} in mpich_stale|mpich_send_cost) ;; *) continue ;; esac
		echo "-- hung rank: pid $pid ($exe)"
		for t in /proc/$pid/task/*; do
			echo "   thread ${t##*/} $(cat "$t/comm" 2>/dev/null) state $(sed 's/.*) \(.\).*/\1/' "$t/stat" 2>/dev/null) wchan $(cat "$t/wchan" 2>/dev/null)"
			sed 's/^/      /' "$t/stack" 2>/dev/null
		done
		if command -v gdb >/dev/null 2>&1; then
			timeout 60 gdb -p "$pid" -batch -nx -ex 'set pagination off' \
				-ex 'thread apply all bt' </dev/null 2>&1 |
				grep -e '^Thread' -e '^#' | sed 's/^/   /'
		else
			echo "   (no gdb: user stacks not shown)"
		fi
	done
}

# mpiexec.mpich -n 2 on one node, killed after $VMT_MPICH_TIMEOUT s (150) with every rank's
# stacks shown first; $1 names the run, the rest go to the job. UCX's protocol tables
# (UCX_PROTO_INFO=y, where a run asks for them) are shown as proto_summary's rows.
run_job() {
	local name=$1 out=/tmp/vmt_ucx_job.$$ limit=${VMT_MPICH_TIMEOUT:-150} waited=0 rc pid
	shift
	echo "== $name"
	mpiexec.mpich -n 2 -launcher fork "$@" >"$out" 2>&1 &
	pid=$!
	while [ $waited -lt "$limit" ] && kill -0 $pid 2>/dev/null; do
		sleep 1
		waited=$((waited + 1))
	done
	if kill -0 $pid 2>/dev/null; then
		{ echo "-- the job did not exit within $limit s: the ranks' stacks"; dump_hung $pid; } \
			>"$out.stacks"
		local procs
		procs=$(descendants $pid)
		kill -TERM $pid 2>/dev/null
		sleep 5
		kill -KILL $procs 2>/dev/null
		wait $pid
		rc=124
	else
		wait $pid
		rc=$?
	fi
	grep -v -e '|' -e '^\[.*\] *+-' -e '^-*+' "$out"
	[ ! -e "$out.stacks" ] || cat "$out.stacks"
	if grep -q 'cfg#' "$out"; then
		echo "-- protocols UCX chose for tagged sends (UCX_PROTO_INFO=y; zero-copy from the row that says so):"
		proto_summary "$out"
	fi
	if [ $rc != 0 ] && teardown_abort_only "$out"; then
		echo "NOTE: UCX aborted after the job's verdict (ib_device.c:210, UCX issue 10432, also seen without the module): the verdict stands"
		rc=0
	elif teardown_hang_only "$out" $rc; then
		echo "NOTE: the job hung after its verdict, in MPI_Finalize (killed after $limit s; an open problem, doc/ucx.md): the verdict stands"
		rc=0
	fi
	rm -f "$out" "$out.stacks"
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
	local zcopy=(-genv UCX_RNDV_SCHEME get_zcopy -genv UCX_PROTO_INFO y)
	local fail=0
	if [ "${VMT_MPICH_REPEAT:-0}" -gt 0 ] 2>/dev/null; then
		repeat_runs "$VMT_MPICH_REPEAT"
		return
	fi
	run_job "stock UCX, zero-copy forced (shown, not judged)" "${zcopy[@]}" \
		-genv UCX_MEM_MMAP_HOOK_MODE bistro "$job" --changes all || fail=1
	run_job "libvmtrack-ucx, kmod tracker, zero-copy forced" "${with[@]}" "${zcopy[@]}" \
		-genv VMTRACK_TRACKER kmod "$job" --changes all --expect-vmtrack --expect-cached ||
		fail=1
	run_job "libvmtrack-ucx, hooks tracker, zero-copy forced" "${with[@]}" "${zcopy[@]}" \
		-genv VMTRACK_TRACKER hooks "$job" --changes libc --expect-vmtrack --expect-cached ||
		fail=1
	local with_zcopy=("${with[@]}" "${zcopy[@]}")   # send_costs' module runs
	send_costs
	return $fail
}

# VMT_MPICH_REPEAT=N (UCX 1.14 on): the stock and the kmod run N times each, alternating, in
# this one guest, and how many of each hung or aborted after their verdict: the hang in
# MPI_Finalize (doc/ucx.md) is rare, and a guest per run would cost a boot each.
repeat_runs() {
	local n=$1 i run out=/tmp/vmt_ucx_repeat.$$ fail=0
	local -A runs=() hung=() aborted=()
	for ((i = 1; i <= n; i++)); do
		for run in stock kmod; do
			case $run in
			stock) run_job "stock UCX, zero-copy forced, run $i of $n" "${zcopy[@]}" \
				-genv UCX_MEM_MMAP_HOOK_MODE bistro "$job" --changes all ;;
			kmod) run_job "libvmtrack-ucx, kmod tracker, zero-copy forced, run $i of $n" \
				"${with[@]}" "${zcopy[@]}" -genv VMTRACK_TRACKER kmod "$job" --changes all \
				--expect-vmtrack --expect-cached ;;
			esac >"$out" 2>&1 || fail=1
			cat "$out"
			runs[$run]=$((${runs[$run]:-0} + 1))
			grep -q '^NOTE: the job hung' "$out" && hung[$run]=$((${hung[$run]:-0} + 1))
			grep -q '^NOTE: UCX aborted' "$out" && aborted[$run]=$((${aborted[$run]:-0} + 1))
		done
	done
	rm -f "$out"
	for run in stock kmod; do
		echo "== $run: ${runs[$run]} runs, ${hung[$run]:-0} hung after their verdict," \
			"${aborted[$run]:-0} aborted after it (ib_device.c:210)"
	done
	return $fail
}

# A zero-copy send's cost (one buffer, pages unchanged) on stock UCX and with the module, the
# ratios and UCT's registrations per send: printed, not judged (an emulated guest); a run that
# fails is reported as not measured. "kmod, UCP uncached" is the module's fallback where UCP's
# hits cannot be checked (VMTRACK_UCX_CHECK=0 forces it): UCX registers per operation.
send_costs() {
	[ -x "$cost_job" ] || { echo "send cost: NOT MEASURED, $cost_job not built"; return; }
	local dir=/tmp/vmt_cost.$$ rc=0 i=0 run
	local zcopy=(-genv UCX_RNDV_SCHEME get_zcopy -genv UCX_PROTO_INFO y)
	local runs=("stock" "kmod" "kmod, UCP uncached" "hooks")
	mkdir -p "$dir"
	for run in "${runs[@]}"; do
		i=$((i + 1))
		case $run in
		stock) set -- "${zcopy[@]}" -genv UCX_MEM_MMAP_HOOK_MODE bistro ;;
		kmod) set -- "${with_zcopy[@]}" -genv VMTRACK_TRACKER kmod ;;
		"kmod, UCP uncached") set -- "${with_zcopy[@]}" -genv VMTRACK_TRACKER kmod \
			-genv VMTRACK_UCX_CHECK 0 ;;
		hooks) set -- "${with_zcopy[@]}" -genv VMTRACK_TRACKER hooks ;;
		esac
		run_job "send cost, $run" "$@" "$cost_job" --iters 10 >"$dir/$i" || rc=1
		cat "$dir/$i"
	done
	if [ $rc != 0 ]; then
		echo "send cost: NOT MEASURED, a run failed (above)"
		rm -rf "$dir"
		return
	fi
	echo "== zero-copy send cost against stock UCX of this run (UCT registrations of the buffer per send)"
	awk 'FNR == 1 { f++ } $1 == "cost" { us[f, $2] = $3; regs[f, $2] = $4; sizes[$2] = 1 }
	     END { for (s in sizes) printf "%8d B: kmod %.2fx (%s regs/send), kmod UCP uncached %.2fx (%s regs/send), hooks %.2fx (%s regs/send), stock %.1f us\n",
	           s, us[2, s] / us[1, s], regs[2, s], us[3, s] / us[1, s], regs[3, s],
	           us[4, s] / us[1, s], regs[4, s], us[1, s] }' \
		"$dir/1" "$dir/2" "$dir/3" "$dir/4" | sort -n
	rm -rf "$dir"
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
# a VMT_MPICH_REPEAT run takes about 25 s under TCG: 180 s a repetition leaves room for hangs
repeat=${VMT_MPICH_REPEAT:-0}
case $repeat in ''|*[!0-9]*) echo "FAIL: VMT_MPICH_REPEAT=$repeat is not a count"; exit 1 ;; esac
"$srcdir/test/vm/run" --rxe --timeout $((480 + repeat * 180)) --share "$builddir" -- \
	env VMT_BUILDDIR="$builddir" bash "$here/mpich_rxe.sh" --in-guest
rc=$?
case $rc in
124) echo "FAIL: the guest timed out" ;;
125|126) skip "the guest rig failed (status $rc)" ;;
esac
exit $rc
