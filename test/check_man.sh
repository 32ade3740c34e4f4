#!/bin/sh
# The manual pages: every function common/libvmtrack.map exports has a section 3 page (its own,
# or a ".so" link to its family's page, whose NAME lists it), every page is installed
# (doc/man/man.mk lists exactly the files in doc/man/), the section 3 pages have the sections a
# reader looks for, their cross-references lead to pages that exist, vmtrack(7) documents every
# VMTRACK_* variable, and every page renders with `man --warnings -l` and `groff -ww` without
# a single warning.
set -u
srcdir=${srcdir:-.}
man_top=$srcdir/doc/man
fail=0
bad() { echo "FAIL: $*"; fail=1; }
command -v man >/dev/null 2>&1 || { echo "SKIP: man (man-db) not installed (scripts/install-deps)"; exit 77; }
command -v groff >/dev/null 2>&1 || { echo "SKIP: groff not installed (scripts/install-deps)"; exit 77; }
[ -d "$man_top/man3" ] || { echo "FAIL: no $man_top/man3"; exit 1; }

tmp=$(mktemp -d) || exit 99
trap 'rm -rf "$tmp"' EXIT

# The page that documents a section 3 file: itself, or what its one ".so" line names.
so_target() { sed -n '1s/^\.so  *//p' "$1"; }
name_line() { sed -n '/^\.SH NAME$/{n;p;q;}' "$1"; }

# 1. every exported symbol has a page that names it
symbols=$(grep -o '\bvmt_[a-z0-9_]*;' "$srcdir/common/libvmtrack.map" | tr -d ';' | sort -u)
[ -n "$symbols" ] || bad "no symbol found in common/libvmtrack.map"
nsym=0
for sym in $symbols; do
	nsym=$((nsym + 1))
	page=$man_top/man3/$sym.3
	[ -f "$page" ] || { bad "$sym has no page (doc/man/man3/$sym.3)"; continue; }
	target=$(so_target "$page")
	if [ -n "$target" ]; then
		[ -f "$man_top/$target" ] || { bad "$sym.3 links to $target, which does not exist"; continue; }
		[ -z "$(so_target "$man_top/$target")" ] || bad "$sym.3 links to $target, itself a link"
		page=$man_top/$target
	fi
	name_line "$page" | grep -q "\\b$sym\\b" || bad "$sym is not in the NAME line of ${page#"$man_top"/}"
done

# 2. the installed list is the directory's content
sed -n 's,^.*\(doc/man/man[0-9]/[^ \\]*\).*$,\1,p' "$srcdir/doc/man/man.mk" | sort >"$tmp/listed"
(cd "$srcdir" && find doc/man -path 'doc/man/man[0-9]/*' -type f | sort) >"$tmp/present"
if ! cmp -s "$tmp/listed" "$tmp/present"; then
	echo "listed in doc/man/man.mk (<) and present in doc/man/ (>) differ:"
	diff "$tmp/listed" "$tmp/present"
	bad "doc/man/man.mk does not install exactly the pages in doc/man/"
fi
# ... and every page is in the packages' expected file lists (scripts/packages checks them)
while read -r page; do
	base=${page#doc/man/}
	grep -q "/share/man/$base.gz\$" "$srcdir/packaging/deb.files" ||
		bad "$page is not in packaging/deb.files"
	grep -q "/share/man/$base\$" "$srcdir/packaging/rpm.files" ||
		bad "$page is not in packaging/rpm.files"
done <"$tmp/present"

# 3. the sections of each section 3 page, and its references to vmtrack's pages
for page in "$man_top"/man3/vmt_*.3; do  # vmtrack.3 is the overview
	[ -n "$(so_target "$page")" ] && continue
	for sec in NAME SYNOPSIS DESCRIPTION "RETURN VALUE" ERRORS THREADS EXAMPLES "SEE ALSO"; do
		grep -q "^\\.SH $sec\$" "$page" || bad "${page#"$man_top"/} has no $sec section"
	done
done
for page in "$man_top"/man[0-9]/*; do
	for ref in $(grep -o '^\.BR* vmt[a-z0-9_]* (\?([0-9])' "$page" | sed 's/^\.BR* //; s/ //'); do
		name=${ref%%(*}
		sec=$(echo "$ref" | tr -dc 0-9)
		[ -f "$man_top/man$sec/$name.$sec" ] || bad "${page#"$man_top"/} refers to $ref, which has no page"
	done
done

# 4. vmtrack(7) documents every variable the environment parser knows (common/util/env.cc)
for var in $(grep -o '{"VMTRACK_[A-Z0-9_]*"' "$srcdir/common/util/env.cc" | tr -d '{"' | sort -u); do
	grep -q "^\.B $var\$" "$man_top/man7/vmtrack.7" || bad "vmtrack(7) does not document $var"
done

# 5. every page renders without a warning (".so" is resolved from the top of the tree)
npages=0
for page in "$man_top"/man[0-9]/*; do
	npages=$((npages + 1))
	rel=${page#"$man_top"/}
	(cd "$man_top" && LC_ALL=C.UTF-8 MANWIDTH=80 man --warnings -E UTF-8 -l "$rel" >/dev/null 2>"$tmp/man.err")
	rc=$?
	[ "$rc" = 0 ] || bad "man -l $rel exits with $rc"
	[ -s "$tmp/man.err" ] && { sed 's/^/  /' "$tmp/man.err"; bad "man --warnings -l $rel warns"; }
	(cd "$man_top" && groff -ww -z -s -man "$rel" 2>"$tmp/groff.err")
	[ -s "$tmp/groff.err" ] && { sed 's/^/  /' "$tmp/groff.err"; bad "groff -ww -man $rel warns"; }
done

[ "$fail" = 0 ] || exit 1
echo "PASS: $nsym exported functions with a page; $npages pages, all installed, all render without a warning"
