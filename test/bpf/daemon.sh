#!/bin/bash
# The guest's vmtrackd for the bpf tests (test/bpf/check-bpf.sh and the commands it hands to
# test_bpf_tracker): test/bpf/daemon.sh start|stop|crash|restart BUILDDIR [ARGS...]
# The pid is kept in /run/vmtrack-test.pid, the daemon's messages in /tmp/vmtrackd-guest.log.
set -u
what=${1:?start|stop|crash|restart}
b=${2:?builddir}
shift 2
pidfile=/run/vmtrack-test.pid
sock=/run/vmtrack/bpf.sock

start() {
	rm -f "$sock"
	# a session of its own: a test that starts it (Check forks each case into a process
	# group it kills at the end) must not take it down
	setsid "$b/vmtrackd" "$@" >>/tmp/vmtrackd-guest.log 2>&1 &
	echo $! >"$pidfile"
	local i
	for i in $(seq 600); do  # loading verifies the programs: seconds under TCG
		[ -S "$sock" ] && return 0
		kill -0 "$(cat "$pidfile")" 2>/dev/null || break
		sleep 0.2
	done
	echo "daemon.sh: vmtrackd did not come up:"; tail -5 /tmp/vmtrackd-guest.log
	return 1
}

stop() {  # signal
	local pid
	pid=$(cat "$pidfile" 2>/dev/null) || return 0
	kill "-$1" "$pid" 2>/dev/null
	while kill -0 "$pid" 2>/dev/null; do sleep 0.1; done
	rm -f "$pidfile"
}

case $what in
start) start "$@" ;;
stop) stop TERM ;;
crash) stop KILL ;;
restart) stop TERM && start "$@" ;;
*) echo "daemon.sh: start|stop|crash|restart" >&2; exit 2 ;;
esac
