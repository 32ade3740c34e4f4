#!/bin/bash
# Runs inside the guest (make check-bpf-vm -> test/vm/run; test/vm/check-vm.sh too, so every
# kernel of the matrix runs it): vmtrackd's hooks on this kernel, the bpf tracker's contract
# (as nobody, and the daemon restart/crash cases as root), the scenario suite and the stress
# with --tracker bpf, hostile clients, and the figures. Exit 1 if any test failed, 77 if this
# kernel cannot run the daemon (it says why).
# Usage: check-bpf.sh BUILDDIR SRCDIR
set -u
b=${1:?builddir}
s=${2:?srcdir}
d="$s/test/bpf/daemon.sh"
failed=()

step() {
	local name=$1 rc t0
	shift
	echo "=== $name"
	t0=$(date +%s)
	"$@"
	rc=$?
	t0="$(( $(date +%s) - t0 )) s"
	case $rc in
	0) echo "PASS: $name ($t0)" ;;
	77) echo "SKIP: $name ($t0)" ;;
	*) echo "FAIL: $name (exit $rc, $t0)"; failed+=("$name") ;;
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
nobody() { setpriv --reuid=65534 --regid=65534 --clear-groups "$@"; }
step "bpf tracker contract (as nobody)" \
	nobody env CK_RUN_CASE=bpf "$b/test/bpf/test_bpf_tracker"
step "bpf tracker: daemon restart and crash" \
	env CK_RUN_CASE=daemon VMT_BPF_RESTART="$d restart $b" VMT_BPF_CRASH="$d crash $b" \
	VMT_BPF_STOP="$d stop $b" VMT_BPF_START="$d start $b" "$b/test/bpf/test_bpf_tracker"
echo "=== vmtrack info (bpf), not pass/fail"
VMTRACK_TRACKER=bpf "$b/vmtrack" info || echo "(vmtrack info exited $?)"
step "vmtrack check --tracker bpf --stress (as nobody)" \
	nobody env VMTRACK_TRACKER=bpf "$b/vmtrack" check --tracker bpf --stress
"$d" restart "$b" --max-per-user 10
step "vmtrackd against hostile clients" "$b/test/bpf/bpf_daemon_hostile" 10

echo "=== figures (not pass/fail; TCG: each is the minimum of 3 rounds, alternated, in this boot)"
min() { sort -n | head -1; }
val() { "$b/test/bpf/bpf_bench" "$@" | awk '{print $2}'; }
ratio() { awk -v a="$1" -v b="$2" 'BEGIN { if (b > 0) printf "%.2f", a / b; else print "?" }'; }
figures() {
	local r none="" plain="" use="" hn="" hb=""
	for r in 1 2 3; do
		"$d" stop "$b"
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
	figures
	echo "=== vmtrack check, every tracker (this kernel's table, not pass/fail)"
	"$b/vmtrack" check || echo "(vmtrack check exited $?)"
else
	echo "(figures and the table of every tracker skipped: VMT_BPF_FIGURES=0)"
fi

"$d" stop "$b"
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
