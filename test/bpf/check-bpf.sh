#!/bin/bash
# Runs inside the guest (make check-bpf-vm -> test/vm/run; test/vm/check-vm.sh too, so every
# kernel of the matrix runs it): vmtrackd's hooks on this kernel, the bpf tracker's contract
# (as nobody, and the daemon restart/crash cases as root), the scenario suite and the stress
# with --tracker bpf, hostile clients, and the figures. Exit 1 if any test failed, 77 if this
# kernel cannot run the daemon (it says why). Every step and every wait for the daemon is
# bounded: a hang fails its step in at most 3 minutes, saying what was stuck where.
# Usage: check-bpf.sh BUILDDIR SRCDIR
set -u
b=${1:?builddir}
s=${2:?srcdir}
d="$s/test/bpf/daemon.sh"
failed=()

pidfile=/run/vmtrack-test.pid

# What a step left running is doing: its processes (kernel stacks) and the daemon's.
describe_stuck() {  # session
	local p
	echo "  its processes:"
	ps -s "$1" -o pid=,stat=,wchan:32=,etime=,args= 2>/dev/null | sed 's/^/    /'
	for p in $(ps -s "$1" -o pid= 2>/dev/null); do
		[ -r "/proc/$p/stack" ] || continue
		echo "  pid $p ($(cat "/proc/$p/comm" 2>/dev/null)) in the kernel:"
		sed 's/^/    /' "/proc/$p/stack" 2>/dev/null
	done
	p=$(cat "$pidfile" 2>/dev/null) && [ -d "/proc/$p" ] &&
		echo "  vmtrackd (pid $p): $(awk '/^State:/ {print $2, $3}' "/proc/$p/status")," \
			"wchan $(cat "/proc/$p/wchan" 2>/dev/null)"
	echo "  vmtrackd's last messages:"
	tail -n 10 /tmp/vmtrackd-guest.log 2>/dev/null | sed 's/^/    /'
}

# step NAME SECONDS COMMAND...: runs COMMAND in a session of its own, at most SECONDS (about
# ten times what it takes under TCG): past that, what it does is printed, every process of
# the session is killed (Check's cases run in process groups of their own, which a group kill
# would miss; vmtrackd runs in its own session) and the step fails naming itself.
step() {
	local name=$1 limit=$2 rc t0 pid late=0
	shift 2
	echo "=== $name"
	t0=$(date +%s)
	setsid "$@" &
	pid=$!
	while kill -0 "$pid" 2>/dev/null; do
		if [ $(( $(date +%s) - t0 )) -ge "$limit" ]; then
			late=1
			echo "TIMEOUT: $name: still running after $limit s"
			describe_stuck "$pid"
			pkill -KILL -s "$pid"
			break
		fi
		sleep 1
	done
	wait "$pid"
	rc=$?
	t0="$(( $(date +%s) - t0 )) s"
	if [ "$late" = 1 ]; then
		echo "FAIL: $name (timed out after $limit s)"
		failed+=("$name")
		return 1
	fi
	case $rc in
	0) echo "PASS: $name ($t0)" ;;
	77) echo "SKIP: $name ($t0)" ;;
	*) echo "FAIL: $name (exit $rc, $t0)"; failed+=("$name"); return 1 ;;
	esac
}

if [ ! -x "$b/vmtrackd" ]; then
	echo "SKIP: bpf tracker: vmtrackd not built (configure found no clang, bpftool or libbpf)"
	exit 77
fi
echo "guest: $(uname -r), $(nproc) CPUs"
if ! "$b/vmtrackd" --check; then
	echo "SKIP: bpf tracker: vmtrackd refuses this kernel (above)"
	exit 77
fi
t0=$(date +%s)
rm -f /tmp/vmtrackd-guest.log
if ! "$d" start "$b"; then
	# Before 5.12 the verifier refuses the programs (vmtrackd says so): a skip there only.
	if [ "$(printf '%s\n5.12\n' "$(uname -r | cut -d- -f1)" | sort -V | head -1)" != 5.12 ]; then
		echo "SKIP: bpf tracker: vmtrackd refuses this kernel ($(uname -r)): $(cat /run/vmtrack/vmtrackd.why 2>/dev/null)"
		exit 77
	fi
	echo "FAIL: vmtrackd did not start"
	exit 1
fi
echo "vmtrackd up in $(( $(date +%s) - t0 )) s"
nobody=(setpriv --reuid=65534 --regid=65534 --clear-groups)
step "bpf tracker contract (as nobody)" 180 \
	"${nobody[@]}" env CK_RUN_CASE=bpf "$b/test/bpf/test_bpf_tracker"
# The daemon cases one at a time (each about 10 s under TCG; Check gives each 150 s, and
# daemon.sh fails a daemon that does not stop within 30 s or come up within 60 s). After a
# failed case a fresh daemon is started; if none comes up, or the cases together took over
# 5 minutes (something hangs in each), the rest are not run: they would only wait too.
series=$(date +%s)
for c in daemon_restart_is_a_change daemon_stop_falls_back_until_back \
	restart_racing_registrations daemon_crash_keeps_tracking silent_daemon_is_bounded; do
	if [ $(( $(date +%s) - series )) -gt 300 ]; then
		echo "FAIL: bpf tracker: $c not run: the daemon cases took over 300 s (above)"
		failed+=("$c (not run)")
		continue
	fi
	step "bpf tracker: $c" 180 env CK_RUN_CASE="$c" VMT_BPF_RESTART="$d restart $b" \
		VMT_BPF_CRASH="$d crash $b" VMT_BPF_STOP="$d stop $b" VMT_BPF_START="$d start $b" \
		"$b/test/bpf/test_bpf_tracker" && continue
	echo "=== a fresh daemon after $c"
	if ! "$d" restart "$b"; then
		echo "FAIL: no vmtrackd after $c: the remaining daemon cases are not run"
		failed+=("daemon after $c")
		break
	fi
done
echo "=== vmtrack info (bpf), not pass/fail"
VMTRACK_TRACKER=bpf timeout -k 5 60 "$b/vmtrack" info || echo "(vmtrack info exited $?)"
step "vmtrack check --tracker bpf --stress (as nobody)" 180 \
	"${nobody[@]}" env VMTRACK_TRACKER=bpf "$b/vmtrack" check --tracker bpf --stress
if "$d" restart "$b" --max-per-user 10; then
	step "vmtrackd against hostile clients" 180 "$b/test/bpf/bpf_daemon_hostile" 10
else
	echo "FAIL: vmtrackd against hostile clients (no daemon with --max-per-user 10)"
	failed+=("hostile clients")
fi

echo "=== figures (not pass/fail; TCG: each is the minimum of 3 rounds, alternated, in this boot)"
min() { sort -n | head -1; }
val() { timeout -k 5 300 "$b/test/bpf/bpf_bench" "$@" | awk '{print $2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "?" }'; }
figures() {
	local r none="" plain="" use="" hn="" hb=""
	for r in 1 2 3; do
		"$d" stop "$b" || return 1
		none+="$(val munmap plain 400) "
		"$d" start "$b" || return 1
		plain+="$(val munmap plain 400) "
		use+="$(val munmap use 400) "
		hn+="$(val hit none 200000) "
		hb+="$(val hit bpf 200000) "
	done
	none=$(tr ' ' '\n' <<<"$none" | grep . | min)
	plain=$(tr ' ' '\n' <<<"$plain" | grep . | min)
	use=$(tr ' ' '\n' <<<"$use" | grep . | min)
	hn=$(tr ' ' '\n' <<<"$hn" | grep . | min)
	hb=$(tr ' ' '\n' <<<"$hb" | grep . | min)
	echo "munmap of a populated 64 KiB range (median of 400): programs detached $none ns;" \
		"attached, process without vmtrack $plain ns ($(ratio "$plain" "$none")x);" \
		"process with a bpf cache watching 64 other ranges $use ns ($(ratio "$use" "$none")x)"
	echo "hit (vmt_get+vmt_put of a cached 64 KiB range, null device): none $hn ns," \
		"bpf $hb ns ($(ratio "$hb" "$hn")x)"
}
# The figures and the table of every tracker take minutes under TCG: make check-bpf-vm only.
if [ "${VMT_BPF_FIGURES:-1}" = 1 ]; then
	figures || { echo "FAIL: figures: vmtrackd did not stop or start (above)"; failed+=("figures"); }
	echo "=== vmtrack check, every tracker (this kernel's table, not pass/fail)"
	timeout -k 5 600 "$b/vmtrack" check || echo "(vmtrack check exited $?)"
else
	echo "(figures and the table of every tracker skipped: VMT_BPF_FIGURES=0)"
fi

if ! "$d" stop "$b"; then
	echo "FAIL: vmtrackd did not stop"
	failed+=("daemon stop")
fi
echo "=== after the daemon stopped"
if ls /sys/fs/bpf/vmtrack-abi1/ 2>/dev/null | grep -q .; then
	echo "FAIL: pins left in /sys/fs/bpf/vmtrack-abi1: $(ls /sys/fs/bpf/vmtrack-abi1)"
	failed+=("pins left")
else
	echo "PASS: nothing left pinned"
fi
echo "--- vmtrackd's messages"
cat /tmp/vmtrackd-guest.log
if dmesg | grep -E -A15 'BUG:|WARNING:|Oops|general protection'; then
	echo "FAIL: the guest kernel logged a bug (above)"
	failed+=("kernel log")
fi
if [ ${#failed[@]} -gt 0 ]; then
	echo "check-bpf: FAILED: ${failed[*]}"
	exit 1
fi
echo "check-bpf: all passed"
