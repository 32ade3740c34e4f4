#!/bin/bash
# Load/unload cycles of vmtrack.ko with work in between, checking for leaks.
# Runs in the guest (test/vm/run exports VMT_VM_KMOD, the module it loaded); as root.
# Usage: loadcycle.sh [CONTRACT_TEST [CYCLES]]   exit 0 PASS, 1 FAIL, 77 SKIP
set -u
contract=${1:-}
cycles=${2:-5}
ko=${VMT_VM_KMOD:-}

skip() { echo "SKIP: loadcycle: $*"; exit 77; }
fail() { echo "FAIL: loadcycle: $*"; exit 1; }

[ "$(id -u)" = 0 ] || skip "needs root (run under test/vm/run)"
[ -n "$ko" ] && [ -r "$ko" ] || skip "VMT_VM_KMOD (the module file) not set (run under test/vm/run)"
grep -q '^vmtrack ' /proc/modules || skip "vmtrack.ko is not loaded"

slab() { awk '/^Slab:/ { print $2 }' /proc/meminfo; }
dmesg_mark=$(dmesg | wc -l)

# Unload must be refused while a file is open, and while only a mapping holds it.
exec 3</dev/vmtrack
rmmod vmtrack 2>/dev/null && fail "rmmod succeeded with /dev/vmtrack open"
exec 3<&-

slab0=$(slab)
for i in $(seq 1 "$cycles"); do
	rmmod vmtrack || fail "rmmod (cycle $i)"
	[ -e /dev/vmtrack ] && { sleep 0.5; [ -e /dev/vmtrack ] && fail "/dev/vmtrack still there"; }
	insmod "$ko" || fail "insmod (cycle $i)"
	for t in 1 2 3 4 5 6 7 8 9 10; do [ -e /dev/vmtrack ] && break; sleep 0.1; done
	if [ -n "$contract" ]; then
		CK_RUN_CASE=hostile CK_VERBOSITY=silent "$contract" >/dev/null ||
			fail "contract test (hostile) in cycle $i"
		CK_RUN_CASE=changes CK_VERBOSITY=silent "$contract" >/dev/null ||
			fail "contract test (changes) in cycle $i"
	fi
done
rmmod vmtrack || fail "final rmmod"
grep -q vmtrack_wk /proc/slabinfo 2>/dev/null && fail "the watch slab cache survived unload"
slab1=$(slab)
log=$(dmesg | tail -n +"$((dmesg_mark + 1))")
if echo "$log" | grep -E 'vmtrack: leak|Objects remaining|BUG:|WARNING:|Oops|kmemleak' >&2; then
	fail "the kernel log shows a leak or a bug"
fi
if [ -w /sys/kernel/debug/kmemleak ]; then
	echo scan >/sys/kernel/debug/kmemleak
	if grep -q vmtrack /sys/kernel/debug/kmemleak; then
		cat /sys/kernel/debug/kmemleak >&2
		fail "kmemleak reports vmtrack objects"
	fi
	kml="kmemleak clean"
else
	kml="kmemleak not in this kernel"
fi
insmod "$ko" || fail "insmod after the cycles"
for t in 1 2 3 4 5 6 7 8 9 10; do [ -e /dev/vmtrack ] && break; sleep 0.1; done
echo "loadcycle: $cycles cycles, Slab ${slab0} kB -> ${slab1} kB after unload, $kml," \
	"no leak reported at unload"
echo "PASS: loadcycle"
