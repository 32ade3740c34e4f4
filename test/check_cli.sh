#!/bin/sh
# `vmtrack check` as users run it: the table, --json, the exit status, bad usage; and the
# warning for a VMTRACK_* name that no part of vmtrack reads.
set -u
VMTRACK=${VMTRACK:-./vmtrack}
fail() { echo "FAIL: $*"; exit 1; }

out=$($VMTRACK check --tracker pass --scenario mmap-fixed --scenario munmap-mmap 2>/dev/null)
st=$?
echo "$out"
[ $st -eq 0 ] || fail "check --tracker pass exited $st"
echo "$out" | grep -q '^mmap-fixed  *caught' || fail "pass/mmap-fixed not caught"

# "none" claims nothing: stale results, yet exit 0; and the JSON says stale and not failed.
json=$($VMTRACK check --json --tracker none --scenario mmap-fixed 2>/dev/null)
st=$?
echo "$json"
[ $st -eq 0 ] || fail "check --tracker none exited $st"
echo "$json" | grep -q '"result": "STALE", "claimed": false, "failed": false' ||
	fail "none/mmap-fixed: expected an unclaimed STALE in the JSON"
echo "$json" | grep -q '"failures": 0' || fail "JSON failures"
if command -v python3 >/dev/null 2>&1; then
	echo "$json" | python3 -c 'import json, sys; d = json.load(sys.stdin); assert d["results"][0]["tracker"] == "none"' ||
		fail "--json is not valid JSON"
fi

$VMTRACK check --tracker bogus >/dev/null 2>&1
[ $? -eq 2 ] || fail "unknown tracker: expected exit 2"
$VMTRACK check --scenario bogus >/dev/null 2>&1
[ $? -eq 2 ] || fail "unknown scenario: expected exit 2"
$VMTRACK check --timeout 0 >/dev/null 2>&1
[ $? -eq 2 ] || fail "--timeout 0: expected exit 2"
n=$($VMTRACK check --list | wc -l)
[ "$n" -ge 9 ] || fail "--list shows $n scenarios"

# Variables the adapters read are known to the library; a misspelt one is named.
warn=$(VMTRACK_UCX=1 VMTRACK_UCX_NATIVE=1 VMTRACK_OFI=1 VMTRACK_OFI_MAX_RANGES=64 \
	$VMTRACK info 2>&1 >/dev/null | grep 'is not a variable vmtrack reads')
[ -z "$warn" ] || fail "an adapter's variable is reported as unknown: $warn"
VMTRACK_TRAKCER=hooks $VMTRACK info 2>&1 >/dev/null | grep -q 'VMTRACK_TRAKCER is not a variable' ||
	fail "a misspelt VMTRACK_* name gets no warning"
echo "PASS"
