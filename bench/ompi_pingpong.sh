#!/bin/bash
# MPI ping-pong (bench/mpi_pingpong) with Open MPI's own rcache (grdma) against vmtrack's
# component (mpirun --tune, the supported way), same transport, in one run: the two jobs
# alternate ROUNDS times and each size's best round is taken per side. Prints latency, bandwidth
# and the vmtrack/grdma ratios, and the CPU. Not a test: nothing is judged.
#
#   bench/ompi_pingpong.sh [--rounds R] [--max BYTES] [--scale S] TRANSPORT
#   bench/ompi_pingpong.sh --guest [--rounds R] ... TRANSPORT   boots the guest rig (soft-RoCE)
#
# TRANSPORT: sm   pml ob1, btl sm (Open MPI 5) or vader (4.1), the host's shared memory: its
#                 single copy (CMA) registers nothing, so the rcache matters little there;
#            uct  pml ob1, btl uct on rxe0 (guest, Open MPI 5): registrations through "grdma",
#                 which vmtrack serves under --tune;
#            mtl-ofi  pml cm, mtl ofi over verbs;ofi_rxm on rxe0 (guest): no rcache, libfabric's
#                 MR cache registers; stock (Open MPI's monitor) against vmtrack's monitor
#                 (libvmtrack-ofi, kmod tracker) under the tune file. (btl ofi refuses ofi_rxm.)
# Run from the build directory (or set VMT_BUILDDIR).
set -u
builddir=${VMT_BUILDDIR:-$(pwd)}
here=$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)
srcdir=$(cd "$here/.." && pwd)
rounds=5 max=4194304 scale=1 guest=0
while [ $# -gt 1 ]; do
	case $1 in
	--rounds) rounds=$2; shift 2 ;;
	--max) max=$2; shift 2 ;;
	--scale) scale=$2; shift 2 ;;
	--guest) guest=1; shift ;;
	--in-guest) shift ;;
	*) break ;;
	esac
done
transport=${1:-}
case $transport in sm|uct|mtl-ofi) ;; *) sed -n '2,18p' "$0"; exit 2 ;; esac
job=$builddir/bench/mpi_pingpong
[ -x "$job" ] || { echo "no $job: make bench/mpi_pingpong"; exit 2; }

if [ "$guest" = 1 ]; then
	exec "$srcdir/test/vm/run" --rxe --timeout 1500 --share "$builddir" -- \
		env VMT_BUILDDIR="$builddir" bash "$0" --in-guest --rounds "$rounds" --max "$max" \
		--scale "$scale" "$transport"
fi
in_guest=no
if ip link show vmt0 >/dev/null 2>&1; then   # in the guest rig: rxe0 needs an address
	in_guest=yes
	ip addr add 10.77.0.1/24 dev vmt0 2>/dev/null
	ip link set vmt0 up
	sleep 1
fi
vmt_srcdir=$srcdir
. "$srcdir/test/ompi/ompi_env.sh"

args=(--allow-run-as-root -np 2 --mca pml ob1 --mca mpi_leave_pinned 1 --mca osc ^ucx)
vmt_extra=()
peer=grdma   # the other side's name: Open MPI's own rcache
case $transport in
sm)
	sm=sm
	ompi_info 2>/dev/null | grep -q 'MCA btl: vader' && sm=vader
	args+=(--mca btl "self,$sm") ;;
uct)
	args+=(--mca btl uct,self --mca btl_uct_memory_domains rxe0 --mca btl_uct_transports any
		-x UCX_IB_GID_INDEX=0) ;;
mtl-ofi)
	# FI_UNIVERSE_SIZE: ofi_rxm's verbs CQs sized for 256 peers are too large for rxe
	args=(--allow-run-as-root -np 2 --mca pml cm --mca mtl ofi --mca osc ^ucx
		--mca mtl_ofi_provider_include 'verbs;ofi_rxm' -x FI_VERBS_IFACE=vmt0 -x FI_UNIVERSE_SIZE=2)
	vmt_extra=(-x LD_PRELOAD="$builddir/.libs/libvmtrack-ofi.so" -x VMTRACK_TRACKER=kmod)
	peer=stock ;;
esac

run() {  # side -> the job's lines, or nothing
	if [ "$1" = grdma ]; then
		env -u OMPI_MCA_mca_base_component_path timeout 600 mpirun "${args[@]}" \
			"$job" "$max" "$scale" 2>&1
	else
		timeout 600 mpirun --tune "$tune" "${args[@]}" "${vmt_extra[@]}" "$job" "$max" \
			"$scale" 2>&1
	fi
}

out=$(mktemp -d)
trap 'rm -rf "$out"' EXIT
for ((r = 0; r < rounds; r++)); do
	for side in grdma vmtrack; do
		run "$side" >"$out/$side.$r"
		grep -q '^size ' "$out/$side.$r" || { echo "the $side job failed:"; cat "$out/$side.$r"; exit 1; }
	done
done

cpu=$(sed -n 's/^model name[[:space:]]*: //p' /proc/cpuinfo | head -n1)
echo "mpi_pingpong, $transport, Open MPI $(ompi_info --version 2>/dev/null | sed -n 's/^Open MPI v//p'),"\
	"best of $rounds alternating rounds per side, CPU: $cpu, $(nproc) CPUs, load $(cut -d' ' -f1 /proc/loadavg)"
[ "$in_guest" = no ] || echo "(in the guest rig: qemu TCG emulates the CPU, compare the ratios only)"
[ "$transport" != sm ] || echo "(sm: single copy through CMA registers nothing: the rcache is not on this path)"
# the best of the rounds per size for side $1: the lowest latency (column 6), the highest
# bandwidth (column 8): on a shared machine other work only ever adds time to a round
best() {
	# Open MPI's help text may carry NUL bytes, which awk does not take
	cat "$out/$1".* | tr -d '\0' | awk -v col="$2" '$1 == "size" { print $2, $col }' |
		awk -v col="$2" '{ if (!($1 in v) || (col == 6 ? $2 < v[$1] : $2 > v[$1])) v[$1] = $2 }
			END { for (s in v) print s, v[s] }' | sort -n
}
# (files, not process substitution: the guest rig has no /dev/fd)
for side in grdma vmtrack; do
	best "$side" 6 >"$out/best-$side.lat"
	best "$side" 8 >"$out/best-$side.bw"
done
join "$out/best-grdma.lat" "$out/best-vmtrack.lat" >"$out/lat"
join "$out/best-grdma.bw" "$out/best-vmtrack.bw" >"$out/bw"
if [ ! -s "$out/lat" ]; then
	echo "no figure parsed from the jobs' output; their first lines:"
	head -n 12 "$out"/grdma.0 "$out"/vmtrack.0 | cat -A | cut -c1-200
	exit 1
fi
join "$out/lat" "$out/bw" | awk -v peer="$peer" '
	BEGIN { printf "%10s %12s %12s %7s %12s %12s %7s\n", "bytes", peer "_us", "vmtrack_us",
		"ratio", peer "_MB/s", "vmtrack_MB/s", "ratio" }
	{ printf "%10d %12.2f %12.2f %7.3f %12.3f %12.3f %7.3f\n", $1, $2, $3, $3 / $2, $4, $5,
		($4 > 0 ? $5 / $4 : 0) }'
echo "(ratio: vmtrack / $peer; latency below 1 and bandwidth above 1 favour vmtrack)"
