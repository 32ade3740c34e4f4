#!/bin/sh
# Each condition of the takeover (ompi-rcache/rcache_vmtrack_takeover.c) made false in a real
# MPI process (a singleton of test/ompi/mpi_hooks_check): the component says why at
# --mca rcache_vmtrack_verbose 10 and Open MPI's patcher stays, as before the takeover. With
# every condition met, the takeover happens. (That the memory framework is already registered
# cannot be arranged from outside a process: test_ompi_takeover covers it on the decision.)
# Run by `make check` from the top build directory.
set -u
builddir=${VMT_BUILDDIR:-$(pwd)}
prog="$builddir/test/ompi/mpi_hooks_check"
[ -x "$prog" ] && [ -f "$builddir/.libs/mca_rcache_vmtrack.so" ] || { echo "FAIL: $prog or the component not built"; exit 1; }
if [ -e /dev/vmtrack ]; then
	echo "SKIP: vmtrack.ko is loaded here: every case would give \"vmtrack.ko is usable\""
	exit 77
fi
. "$(dirname "$0")/ompi_env.sh"
export OMPI_MCA_rcache_vmtrack_verbose=10 OMPI_MCA_btl=self OMPI_MCA_pml=ob1

fail=0
case_() {  # case_ NAME EXPECTED-TEXT ENV-ASSIGNMENTS...: run the singleton with them
	name=$1 want=$2; shift 2
	out=$(env "$@" timeout 120 "$prog" 2>&1); rc=$?
	line=$(printf '%s\n' "$out" | grep 'rcache vmtrack: .*patcher' | head -1 | sed 's/^\[[^]]*\] //')
	if [ "$rc" -ne 0 ]; then
		printf '%s\n' "$out" | tail -5; echo "FAIL: $name: status $rc"; fail=1
	elif ! printf '%s\n' "$line" | grep -qF "$want"; then
		echo "FAIL: $name: expected \"$want\", got: $line"; fail=1
	else
		echo "ok: $name: $line"
	fi
}

case_ "all conditions met" "vmtrack's hooks are the process's memory patcher" \
	OMPI_MCA_rcache=vmtrack UCX_MEM_MMAP_HOOK_MODE=reloc
# UCX's mode from ucx.conf (UCX reads ./ucx.conf), not the environment
cfg=$(mktemp -d)
echo UCX_MEM_MMAP_HOOK_MODE=reloc >"$cfg/ucx.conf"
out_dir=$(pwd)
cd "$cfg" && case_ "UCX's mode from ucx.conf" "vmtrack's hooks are the process's memory patcher" \
	OMPI_MCA_rcache=vmtrack
cd "$out_dir" && rm -rf "$cfg"
if [ "$ucx_at_exec" = yes ]; then
	# Open MPI 5: UCX loaded and patching before main unless the job starts with the mode
	case_ "UCX mode unset at exec" "start the job with UCX_MEM_MMAP_HOOK_MODE=reloc" \
		VMT_EXPECT_TAKEOVER=0 OMPI_MCA_rcache=vmtrack
	bistro_want="libc is already patched: mmap() by"
else
	# Open MPI 4.1: UCX loads later; the component tells it the mode first
	case_ "UCX mode unset" "vmtrack's hooks are the process's memory patcher (UCX_MEM_MMAP_HOOK_MODE=reloc)" \
		OMPI_MCA_rcache=vmtrack
	bistro_want="UCX_MEM_MMAP_HOOK_MODE=bistro asks UCX to patch"
fi
case_ "rcache not naming vmtrack" "vmtrack is not chosen by name" \
	VMT_EXPECT_TAKEOVER=0 OMPI_MCA_rcache=^grdma
case_ "rcache unset" "vmtrack is not chosen by name (--mca rcache <unset>)" \
	VMT_EXPECT_TAKEOVER=0 OMPI_MCA_rcache=
case_ "rcache_vmtrack_tracker none" "rcache_vmtrack_tracker=none asks for another tracker" \
	VMT_EXPECT_TAKEOVER=0 OMPI_MCA_rcache=vmtrack OMPI_MCA_rcache_vmtrack_tracker=none
case_ "VMTRACK_TRACKER=uffd" "VMTRACK_TRACKER=uffd asks for another tracker" \
	VMT_EXPECT_TAKEOVER=0 OMPI_MCA_rcache=vmtrack VMTRACK_TRACKER=uffd
case_ "--mca memory patcher" "the memory framework selection was set (environment)" \
	VMT_EXPECT_TAKEOVER=0 OMPI_MCA_rcache=vmtrack OMPI_MCA_memory=patcher
case_ "UCX_MEM_MMAP_HOOK_MODE=bistro" "$bistro_want" \
	VMT_EXPECT_TAKEOVER=0 OMPI_MCA_rcache=vmtrack UCX_MEM_MMAP_HOOK_MODE=bistro
ucs=$(ldconfig -p 2>/dev/null | sed -n 's/.*libucs\.so\.0 .*=> //p' | head -1)
if [ -n "$ucs" ]; then
	# libucs's constructor patched libc (bistro, UCX's default on x86-64)
	case_ "UCX loaded and patching before MPI_Init" "libc is already patched: mmap() by" \
		VMT_EXPECT_TAKEOVER=0 OMPI_MCA_rcache=vmtrack LD_PRELOAD="$ucs"
	# loaded but told not to patch libc (as with vmtrack's UCX module): nothing stands in the way
	case_ "UCX loaded with UCX_MEM_MMAP_HOOK_MODE=none" \
		"vmtrack's hooks are the process's memory patcher" \
		OMPI_MCA_rcache=vmtrack LD_PRELOAD="$ucs" UCX_MEM_MMAP_HOOK_MODE=none
else
	echo "note: no libucs.so.0 here: the \"UCX already loaded\" case is not checked"
fi
echo "note: \"vmtrack.ko usable\" is checked where the module is loaded (make check-ompi-vm)" \
	"and on the decision (test_ompi_takeover)"
exit $fail
