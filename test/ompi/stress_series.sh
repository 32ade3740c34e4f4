#!/bin/sh
# Runs the Open MPI stress (test_ompi_scenarios, case "stress" where the binary has it) RUNS
# times and sums what the default-mode vmtrack stress reported: the figures behind the stress
# table of doc/openmpi.md. Not part of `make check` (it takes minutes).
#   test/ompi/stress_series.sh [RUNS] [BINARY]     env: SCN_STRESS_MS (default 3000), and any
#   OMPI_MCA_* / VMTRACK_* to pick the mode (OMPI_MCA_memory=patcher: the opted-out mode)
set -u
runs=${1:-20}
bin=${2:-test/ompi/test_ompi_scenarios}
export SCN_STRESS_MS=${SCN_STRESS_MS:-3000} CK_RUN_CASE=${CK_RUN_CASE:-stress}
tw=0 ts=0 te=0 n=0
i=0
while [ "$i" -lt "$runs" ]; do
	i=$((i + 1))
	out=$("$bin" 2>&1)
	# the last "ompi-vmtrack  N writes checked, M changes, S stale, E wrong" line is the
	# default-mode run (an earlier one, if any, is the "pass" control)
	line=$(printf '%s\n' "$out" | grep '^ompi-vmtrack  *[0-9]* writes checked' | tail -1)
	if [ -z "$line" ]; then
		echo "run $i: no stress line"; printf '%s\n' "$out" | tail -5; continue
	fi
	set -- $(printf '%s\n' "$line" | sed 's/^ompi-vmtrack *\([0-9]*\) writes checked, [0-9]* address-space changes, \([0-9]*\) stale, \([0-9]*\) wrong.*/\1 \2 \3/')
	echo "run $i: $1 writes, $2 stale, $3 wrong $(printf '%s\n' "$line" | sed -n 's/.*wrong: /: /p')"
	tw=$((tw + $1)) ts=$((ts + $2)) te=$((te + $3)) n=$((n + 1))
done
tracker=$(printf '%s\n' "$out" | sed -n 's/.*\[stress\] tracker: \(.*\)/\1/p' | tail -1)
echo "total: $n runs, $tw writes checked, $ts stale, $te wrong${tracker:+ (tracker $tracker)}"
