#!/bin/sh
# libvmtrack exports exactly the functions its public headers declare, each under the version
# node common/libvmtrack.map gives it, and nothing else (no C++ internals, no helpers).
set -u
srcdir=${srcdir:-.}
lib=.libs/libvmtrack.so
fail() { echo "FAIL: $*"; exit 1; }
[ -f "$lib" ] || { echo "SKIP: $lib not built (static-only build)"; exit 77; }
command -v nm >/dev/null 2>&1 || { echo "SKIP: nm not found"; exit 77; }

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT
nm -D --defined-only "$lib" | awk 'NF == 3 && $2 != "A" { print $3 }' | sort >"$tmp/raw"
[ -s "$tmp/raw" ] || fail "nm shows no symbol in $lib"
sed 's/@.*//' "$tmp/raw" | sort -u >"$tmp/exported"
# Function declarations: a vmt_ name followed by "(" outside comments.
sed 's,/\*.*\*/,,g; /^ *\/\?\*/d' "$srcdir"/include/vmtrack.h "$srcdir"/include/vmtrack/*.h |
	grep -o '\bvmt_[a-z0-9_]*(' | tr -d '(' | sort -u >"$tmp/declared"
grep -o '\bvmt_[a-z0-9_]*;' "$srcdir/common/libvmtrack.map" | tr -d ';' | sort -u >"$tmp/listed"

status=0
if ! cmp -s "$tmp/exported" "$tmp/declared"; then
	echo "exported (<) and declared in include/ (>) differ:"
	diff "$tmp/exported" "$tmp/declared"
	status=1
fi
if ! cmp -s "$tmp/exported" "$tmp/listed"; then
	echo "exported (<) and listed in common/libvmtrack.map (>) differ:"
	diff "$tmp/exported" "$tmp/listed"
	status=1
fi
unversioned=$(grep -v '@@VMTRACK_' "$tmp/raw")
[ -z "$unversioned" ] || { echo "without a version node: $unversioned"; status=1; }
[ $status -eq 0 ] || fail "the exported symbols are not the public API"
echo "PASS: $(wc -l <"$tmp/exported") symbols, all declared in include/ and listed by name"
