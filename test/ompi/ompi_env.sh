# Sourced by the Open MPI test scripts (sh): let Open MPI load mca_rcache_vmtrack.so from the
# build tree (a directory holding only it, ahead of the system's component directory), find
# libvmtrack there, and run as root. Needs $builddir (and $vmt_srcdir, the source tree, where
# the sourcing script is not two levels below it); sets $sysdir, $comp, $so, $tune (the
# mpirun --tune file vmtrack installs, made for the build tree) and $ucx_at_exec (yes where
# Open MPI links UCX into its libraries: Open MPI 5).
so="$builddir/.libs/mca_rcache_vmtrack.so"
sysdir=$(ompi_info --path pkglibdir --parsable 2>/dev/null | sed -n 's/^path:pkglibdir://p')
comp="$builddir/test/ompi/components"
mkdir -p "$comp"
ln -sf "$so" "$comp/.mca_rcache_vmtrack.so.$$" &&
	mv -f "$comp/.mca_rcache_vmtrack.so.$$" "$comp/mca_rcache_vmtrack.so"
export OMPI_MCA_mca_base_component_path="$comp:$sysdir"
export LD_LIBRARY_PATH="$builddir/.libs${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}"
export OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1
tune="$builddir/test/ompi/vmtrack-test.tune"
sed -e "s|@COMPONENT_PATH@|$comp:$sysdir|" -e "s|@TUNE_FILE@|$tune|" \
	"${vmt_srcdir:-$(dirname "$0")/../..}/ompi-rcache/openmpi-vmtrack.tune.in" >"$tune"
ucx_at_exec=no
ldd "$builddir/test/ompi/mpi_hooks_check" 2>/dev/null | grep -q 'libucs\.so' && ucx_at_exec=yes
