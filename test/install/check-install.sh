#!/bin/bash
# Checks an installed vmtrack: builds test/install/consumer.c with nothing but what
# `pkg-config vmtrack` says, runs it, and (with a staging root) that nothing was installed
# outside the prefix.
#   check-install.sh [--root DESTDIR] [--prefix PREFIX]
# Without options: the system's installation (the packages). Exit 77 if io_uring is missing.
set -euo pipefail
here=$(cd "$(dirname "$0")" && pwd)
root= prefix=
while [ $# -gt 0 ]; do
	case $1 in
	--root) root=$2; shift 2 ;;
	--prefix) prefix=$2; shift 2 ;;
	*) echo "check-install.sh: unknown option $1" >&2; exit 2 ;;
	esac
done
pc=(pkg-config)
if [ -n "$prefix" ]; then
	# the .pc file says where it was configured to live; a staged tree lives under $root
	export PKG_CONFIG_PATH=$root$prefix/lib/pkgconfig
	export PKG_CONFIG_LIBDIR=$PKG_CONFIG_PATH:/usr/lib/x86_64-linux-gnu/pkgconfig:/usr/share/pkgconfig
	pc+=(--define-variable=prefix="$root$prefix")
	if [ -n "$root" ]; then
		outside=$(cd "$root" && find . ! -type d | sed 's|^\.||' | grep -v "^$prefix/" || true)
		if [ -n "$outside" ]; then
			echo "FAIL: installed outside the prefix $prefix:" >&2
			echo "$outside" >&2
			exit 1
		fi
	fi
fi
"${pc[@]}" --exists vmtrack || { echo "FAIL: pkg-config does not find vmtrack" >&2; exit 1; }
for h in vmtrack.h vmtrack/iouring.h vmtrack/verbs.h; do
	[ -f "$("${pc[@]}" --variable=includedir vmtrack)/$h" ] ||
		{ echo "FAIL: $h is not under pkg-config's includedir" >&2; exit 1; }
done
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
# shellcheck disable=SC2046
cc -Wall -Wextra -Werror -o "$tmp/consumer" "$here/consumer.c" \
	$("${pc[@]}" --cflags vmtrack) $("${pc[@]}" --libs vmtrack) -luring
LD_LIBRARY_PATH=$("${pc[@]}" --variable=libdir vmtrack) VMTRACK_TRACKER=${VMTRACK_TRACKER:-auto} \
	"$tmp/consumer"
