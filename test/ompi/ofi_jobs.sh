# Sourced by test/ompi/mpirun_rxe.sh in the guest (after ompi_env.sh): Open MPI over libfabric's
# verbs;ofi_rxm on rxe0, test/ompi/mpi_ofi_stale, two paths:
#  - mtl ofi (pml cm): ofi_rxm registers the source of a rendezvous itself, through the verbs
#    domain's MR cache, whose monitor is vmtrack's (libvmtrack-ofi) in the vmtrack job;
#  - btl ofi (pml ob1): ob1 registers the source through the rcache framework's "grdma", which
#    the component serves (--tune: --mca rcache vmtrack), and libfabric's cache sits below it.
# Each path runs stock first: the job must send stale bytes after a raw change (only pages the
# provider registered can be stale: zero-copy), else it proves nothing. Then with the tune file,
# libvmtrack-ofi and the kmod tracker: 0 wrong bytes in every change kind, and the registration
# of every fresh set of pages seen (the monitor's witness, or vmtrack's cache).
# A path whose stock job cannot run over this transport, or runs without registering the user's
# pages, is skipped, saying why (measured: the job's output, the provider's capabilities).
# Needs $builddir, $tune. Sets ofi_skips (the reasons) and returns 1 on a failure.

# Every job: libfabric's verbs provider on rxe0's netdev, and a small universe: ofi_rxm sizes
# each verbs CQ by the universe size (FI_UNIVERSE_SIZE, default 256), and rxe refuses a CQ that
# large ("Unable to create verbs CQ", then fi_enable: Invalid argument in mtl ofi's init).
ofi_env=(-x FI_VERBS_IFACE=vmt0 -x FI_UNIVERSE_SIZE=2 --mca osc ^ucx)
ofi_prov='verbs;ofi_rxm'

# Why a job did not start: Open MPI's own lines about libfabric (verbose 1).
ofi_why() {  # output
	printf '%s\n' "$1" |
		grep -E 'fi_[a-z_]+.*(fail|Invalid|error)|does not support|unreachable|cannot be selected' |
		sed 's/^\[[^]]*\] *//' | sort -u | head -n 4 | tr '\n' ' '
}

# The stock job of a path: sets ofi_out; 0 it ran and sent stale bytes after a raw change
# (zero-copy), 1 it ran with none (the source was not registered), 2 it failed after starting,
# 77 it did not start.
ofi_stock() {  # name, mpirun options...
	local name=$1 rc log
	shift
	echo "== $name over $ofi_prov: stock Open MPI (stale bytes shown)"
	log=$(mktemp)
	env -u OMPI_MCA_mca_base_component_path timeout 240 mpirun --allow-run-as-root -np 2 "$@" \
		"${ofi_env[@]}" "$builddir/test/ompi/mpi_ofi_stale" --changes all --expect none \
		>"$log" 2>&1
	rc=$?
	ofi_out=$(tr -d '\0' <"$log")   # Open MPI's help text may carry NUL bytes
	rm -f "$log"
	printf '%s\n' "$ofi_out" | grep -v -e 'CANNOT CREATE FIFO' -e 'not in include list' -e '^ \* ' |
		tail -n 30
	printf '%s\n' "$ofi_out" | grep -q '^rank 1: keep' || return 77
	[ "$rc" = 0 ] || return 2
	printf '%s\n' "$ofi_out" | grep -q 'raw munmap+mmap .* [1-9][0-9]* stale bytes' || return 1
	return 0
}

# The same job on vmtrack: the tune file (rcache vmtrack), libvmtrack-ofi under libfabric's
# MR cache, the kmod tracker; mpi_ofi_stale asserts 0 wrong bytes and the registrations.
ofi_vmtrack() {  # name, expect, mpirun options...
	local name=$1 expect=$2
	shift 2
	echo "== $name: --tune (rcache vmtrack), libvmtrack-ofi, kmod tracker"
	timeout 240 mpirun --allow-run-as-root -np 2 --tune "$tune" "$@" "${ofi_env[@]}" \
		-x LD_PRELOAD="$builddir/.libs/libvmtrack-ofi.so" -x VMTRACK_TRACKER=kmod \
		--mca rcache_vmtrack_verbose 10 --mca rcache_vmtrack_print_stats 1 \
		"$builddir/test/ompi/mpi_ofi_stale" --changes all --expect "$expect"
}

# mtl ofi (pml cm): ofi_rxm registers the source of a rendezvous itself, through the verbs
# domain's MR cache; the monitor's witness shows each registration of the buffer.
ofi_mtl() {
	local mtl=(--mca pml cm --mca mtl ofi --mca mtl_ofi_provider_include "$ofi_prov"
		--mca mtl_ofi_verbose 1)
	ofi_stock "mtl ofi" "${mtl[@]}"
	case $? in
	0) ;;
	77) ofi_skips+="mtl ofi: the stock job does not start ($(ofi_why "$ofi_out")); "
		return 77 ;;
	1) echo "FAIL: mtl ofi stock: no stale byte after a raw change: the source was not" \
		"registered where the peer read it (no zero-copy): the vmtrack job would prove nothing"
		return 1 ;;
	*) echo "FAIL: mtl ofi stock: the job failed"; return 1 ;;
	esac
	ofi_vmtrack "mtl ofi" monitor "${mtl[@]}"
}

# btl ofi (pml ob1): ob1 registers the source through "grdma", which vmtrack serves. Open MPI
# 4.1.4 and 5.0.7 do not take verbs;ofi_rxm there: btl ofi's provider check rejects any provider
# named ofi_rxm (FI_DELIVERY_COMPLETE), and says so only in debug builds (doc/ofi.md). The stock
# job is run all the same: a release that takes it gets the whole check.
ofi_btl() {
	local btl=(--mca pml ob1 --mca btl ofi,self --mca btl_ofi_provider_include "$ofi_prov"
		--mca btl_ofi_verbose 1 --mca mpi_leave_pinned 1)
	ofi_stock "btl ofi" "${btl[@]}"
	case $? in
	0) ofi_vmtrack "btl ofi" rcache "${btl[@]}" ;;
	77) ofi_skips+="btl ofi: the stock job does not start ($(ofi_why "$ofi_out")): btl ofi rejects providers named ofi_rxm (doc/ofi.md); "
		return 77 ;;
	*) echo "FAIL: btl ofi stock: no stale byte after a raw change (no zero-copy) or the job failed"
		return 1 ;;
	esac
}

ofi_jobs() {
	local fail=0 rc
	ofi_skips=
	if [ ! -x "$builddir/test/ompi/mpi_ofi_stale" ]; then
		echo "SKIPPED: ofi: not built (configure found no libfabric)"
		return 0
	fi
	ofi_mtl; rc=$?
	[ "$rc" = 77 ] || [ "$rc" = 0 ] || fail=1
	ofi_btl; rc=$?
	[ "$rc" = 77 ] || [ "$rc" = 0 ] || fail=1
	[ -z "$ofi_skips" ] || echo "SKIPPED: $ofi_skips"
	return $fail
}
