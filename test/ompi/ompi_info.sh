#!/bin/sh
# ompi_info shows the vmtrack rcache component (once) and its MCA parameters, loaded from the
# build tree; and `--mca rcache vmtrack` (grdma left out) names the fix for the BTLs that ask
# for grdma by name. Run by `make check` from the top build directory.
set -u
builddir=${VMT_BUILDDIR:-$(pwd)}
so="$builddir/.libs/mca_rcache_vmtrack.so"
command -v ompi_info >/dev/null 2>&1 || { echo "SKIP: ompi_info not found"; exit 77; }
[ -f "$so" ] || { echo "FAIL: $so not built"; exit 1; }

. "$(dirname "$0")/ompi_env.sh"

fail=0
check() {  # check DESCRIPTION COMMAND...: COMMAND must succeed
	what=$1; shift
	if "$@"; then echo "ok: $what"; else echo "FAIL: $what"; fail=1; fi
}

out=$(ompi_info 2>&1)
n=$(printf '%s\n' "$out" | grep -c 'MCA rcache: vmtrack (MCA v2.1.0, API v3.3.0, Component v0.1.0)')
check "ompi_info lists 'MCA rcache: vmtrack' once (found $n)" test "$n" -eq 1

params=$(ompi_info --param rcache vmtrack --level 9 --parsable 2>&1)
for p in tracker:value:auto max_entries:value:0 max_bytes:value:0 print_stats:value:false \
         verbose:value:0; do
	check "parameter rcache_vmtrack_$p" sh -c "printf '%s\n' \"\$1\" | grep -q \"^mca:rcache:vmtrack:param:rcache_vmtrack_$p\$\"" sh "$params"
done
# the parameter is settable the MCA way
v=$(OMPI_MCA_rcache_vmtrack_tracker=kmod ompi_info --param rcache vmtrack --level 9 --parsable 2>&1 |
	grep '^mca:rcache:vmtrack:param:rcache_vmtrack_tracker:value:')
check "OMPI_MCA_rcache_vmtrack_tracker=kmod shows as the value ($v)" test "$v" = "mca:rcache:vmtrack:param:rcache_vmtrack_tracker:value:kmod"

# an unknown tracker is refused by Open MPI's variable system, naming the valid values
v=$(OMPI_MCA_rcache_vmtrack_tracker=bogus ompi_info --param rcache vmtrack --level 9 2>&1)
check "rcache_vmtrack_tracker=bogus is refused" sh -c "printf '%s\n' \"\$1\" | grep -qi 'bogus'" sh "$v"
# (4.1 lists them as 0:"auto", 1:"kmod"; 5.0 as 0|auto, 1|kmod)
check "... and the valid values are listed" sh -c "printf '%s\n' \"\$1\" | grep -q -e '0:\"auto\", 1:\"kmod\"' -e '0|auto, 1|kmod'" sh "$v"

# `--mca rcache vmtrack` (grdma left out): btl ofi (Debian builds it) asks for grdma by name and
# aborts; the component says so first, naming the fix. (ompi_info does not open components,
# so a singleton MPI program does it.)
prog="$builddir/test/ompi/mpi_rdma_check"
if [ -f "$sysdir/mca_btl_ofi.so" ] && [ -x "$prog" ]; then
	export OMPI_MCA_pml=ob1
	msg=$(OMPI_MCA_rcache=vmtrack OMPI_MCA_btl=self,ofi timeout 120 "$prog" 2>&1); rc=$?
	printf '%s\n' "$msg" | sed -n '/rcache vmtrack/p; /cannot create rcache/p' | head -3
	check "--mca rcache vmtrack --mca btl self,ofi fails (status $rc)" test "$rc" -ne 0
	check "... with a message naming the fix" sh -c "printf '%s\n' \"\$1\" | grep -q 'btl ofi.*--mca rcache vmtrack,grdma.*--mca btl ^ofi'" sh "$msg"
	msg=$(OMPI_MCA_rcache=vmtrack,grdma OMPI_MCA_btl=self,ofi timeout 120 "$prog" 2>&1)
	check "--mca rcache vmtrack,grdma: no complaint" sh -c "! printf '%s\n' \"\$1\" | grep -q 'leaves out grdma'" sh "$msg"
	msg=$(OMPI_MCA_rcache=vmtrack OMPI_MCA_btl=self,vader,tcp timeout 120 "$prog" 2>&1)
	check "--mca rcache vmtrack --mca btl self,vader,tcp: no complaint" sh -c "! printf '%s\n' \"\$1\" | grep -q 'leaves out grdma'" sh "$msg"
else
	echo "note: btl ofi or $prog missing: selection messages not checked"
fi
exit $fail
