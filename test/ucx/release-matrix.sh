#!/bin/bash
# libvmtrack-ucx against UCX releases Debian does not ship (a developer's check, not part of
# `make check`): builds each UCX tag from a UCX git repository the caller has, builds the
# module and test_ucx_release against it, and runs that test with the module built for the
# release and with each module given by --module (for example Debian 12's, built against
# 1.13.1): what a site that upgrades UCX under an installed vmtrack gets.
#
#   test/ucx/release-matrix.sh --ucx-git DIR [--work DIR] [--module LABEL=SO]... TAG...
#
# TAG: a UCX tag (v1.16.0). UCX is built under WORK/ucx-TAG (once; kept), vmtrack under
# WORK/build-TAG. Prints one line per run and exits non-zero if any run failed.
set -euo pipefail
top=$(cd "$(dirname "$0")/../.." && pwd)
ucx_git= work=${TMPDIR:-/tmp}/vmtrack-ucx-releases
modules=()
tags=()
while [ $# -gt 0 ]; do
    case $1 in
    --ucx-git) ucx_git=$2; shift 2 ;;
    --work) work=$2; shift 2 ;;
    --module) modules+=("$2"); shift 2 ;;
    -*) echo "release-matrix: unknown option $1" >&2; exit 2 ;;
    *) tags+=("$1"); shift ;;
    esac
done
if [ -z "$ucx_git" ] || [ ${#tags[@]} -eq 0 ]; then
    echo "usage: $0 --ucx-git DIR [--work DIR] [--module LABEL=SO]... TAG..." >&2
    exit 2
fi
for m in "${modules[@]}"; do
    case $m in *=/*) ;; *) echo "release-matrix: --module wants LABEL=/absolute/path.so" >&2; exit 2 ;; esac
    [ -r "${m#*=}" ] || { echo "release-matrix: no module ${m#*=}" >&2; exit 2; }
done
mkdir -p "$work"
[ -x "$top/configure" ] || { echo "release-matrix: run autoreconf -fi in $top first" >&2; exit 2; }

jobs=$(nproc)

# UCX's own release configuration, without the transports this check does not use.
build_ucx() {  # tag prefix
    local src=$work/src-$1 log=$work/ucx-$1.log
    [ -f "$2/lib/pkgconfig/ucx.pc" ] && return 0
    echo "== UCX $1: building into $2 (log $log)"
    rm -rf "$src"
    mkdir -p "$src"
    git --git-dir="$ucx_git" archive "$1" | tar -x -C "$src"
    (cd "$src" && ./autogen.sh && ./contrib/configure-release --prefix="$2" --enable-mt \
        --without-java --without-go --without-cuda --without-rocm --without-knem \
        --without-xpmem --without-ugni --disable-doxygen-doc &&
        make -j"$jobs" && make install) >"$log" 2>&1 ||
        { echo "UCX $1: build failed, see $log" >&2; return 1; }
}

build_vmtrack() {  # tag prefix
    local b=$work/build-$1 log=$work/build-$1.log
    echo "== vmtrack against UCX $1 in $b (log $log)"
    mkdir -p "$b"
    (cd "$b" &&
        PKG_CONFIG_PATH=$2/lib/pkgconfig "$top/configure" --enable-werror --without-ompi \
            LDFLAGS="-L$2/lib -Wl,-rpath,$2/lib" &&
        make -j"$jobs" libvmtrack.la libvmtrack-ucx.la test/ucx/test_ucx_release) >"$log" 2>&1 ||
        { echo "vmtrack against UCX $1: build failed, see $log" >&2; return 1; }
}

results=()
fail=0
run() {  # tag prefix module label
    local b=$work/build-$1 out=$work/run-$1-$4.log rc=0
    (cd "$b" && VMT_UCX_MODULE=$3 LD_LIBRARY_PATH=$2/lib ./test/ucx/test_ucx_release) >"$out" 2>&1 ||
        rc=$?
    local verdict=pass
    case $rc in 0) ;; 77) verdict=skip ;; *) verdict="FAIL ($rc)"; fail=1 ;; esac
    results+=("UCX $1, module $4: $verdict ($(grep -m1 '^UCX ' "$out" || echo 'no release line'); log $out)")
}

for tag in "${tags[@]}"; do
    prefix=$work/ucx-$tag
    if ! build_ucx "$tag" "$prefix" || ! build_vmtrack "$tag" "$prefix"; then
        results+=("UCX $tag: not built (see above)")
        fail=1
        continue
    fi
    run "$tag" "$prefix" "$work/build-$tag/.libs/libvmtrack-ucx.so" "built-for-it"
    for m in "${modules[@]}"; do
        run "$tag" "$prefix" "${m#*=}" "${m%%=*}"
    done
done
printf '%s\n' "${results[@]}"
exit $fail
