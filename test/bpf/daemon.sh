#!/bin/bash
# The guest's vmtrackd for the bpf tests (test/bpf/check-bpf.sh and the commands it hands to
# test_bpf_tracker): test/bpf/daemon.sh start|stop|crash|restart BUILDDIR [ARGS...]
# The pid is kept in /run/vmtrack-test.pid, the daemon's messages in /tmp/vmtrackd-guest.log.
# Every wait is bounded: a daemon that does not come up, or does not exit when told, is
# described (state, kernel stack, its messages), killed, and the command fails (exit 1).
set -u
what=${1:?start|stop|crash|restart}
b=${2:?builddir}
shift 2
pidfile=/run/vmtrack-test.pid
sock=/run/vmtrack/bpf.sock
log=/tmp/vmtrackd-guest.log
# Loading verifies the programs and an orderly stop detaches them: a few seconds under TCG
# (4 s to come up on 6.12), so these bounds are ten times what a healthy daemon needs.
UP_S=${VMT_BPF_UP_S:-60}
EXIT_S=${VMT_BPF_EXIT_S:-30}

# Whether pid has not exited (a zombie has).
alive() {
	local st
	st=$(awk '/^State:/ {print $2}' "/proc/$1/status" 2>/dev/null) || return 1
	[ -n "$st" ] && [ "$st" != Z ]
}

# Whether the pid of the pid file is still a vmtrackd that has not exited (a reused pid is not
# ours). Not for the one start has just launched: until its exec it is a shell.
running() {
	alive "$1" && [ "$(cat "/proc/$1/comm" 2>/dev/null)" = vmtrackd ]
}

# What is known of a daemon that does not do what it was told, on stderr.
describe() {
	local pid=$1 t
	{
		echo "daemon.sh: vmtrackd (pid $pid) $2; what it was doing:"
		grep -E '^(State|Threads):' "/proc/$pid/status" 2>/dev/null | sed 's/^/  /'
		for t in /proc/"$pid"/task/*; do
			[ -d "$t" ] || continue
			echo "  thread ${t##*/}: wchan $(cat "$t/wchan" 2>/dev/null || echo ?)," \
				"syscall $(cut -d' ' -f1 "$t/syscall" 2>/dev/null || echo ?)"
			sed 's/^/    /' "$t/stack" 2>/dev/null
		done
		echo "  its last messages ($log):"
		tail -n 15 "$log" 2>/dev/null | sed 's/^/    /'
	} >&2
}

# Waits up to $2 seconds for pid $1 to exit: 0 once it has, 1 if it still runs.
gone_within() {
	local i
	for ((i = 0; i < $2 * 10; i++)); do
		running "$1" || return 0
		sleep 0.1
	done
	! running "$1"
}

start() {
	local pid i
	rm -f "$sock"
	# a session of its own: a test that starts it (Check forks each case into a process
	# group it kills at the end) must not take it down
	setsid "$b/vmtrackd" "$@" >>"$log" 2>&1 &
	pid=$!
	echo "$pid" >"$pidfile"
	for ((i = 0; i < UP_S * 5; i++)); do
		[ -S "$sock" ] && return 0
		alive "$pid" || break
		sleep 0.2
	done
	if ! alive "$pid"; then
		echo "daemon.sh: vmtrackd did not come up (it exited):" >&2
		tail -n 5 "$log" >&2
		rm -f "$pidfile"
		return 1
	fi
	describe "$pid" "did not serve $sock within $UP_S s"
	kill -KILL "$pid" 2>/dev/null
	gone_within "$pid" 10 && rm -f "$pidfile"
	return 1
}

stop() {  # signal
	local pid t0 took
	pid=$(cat "$pidfile" 2>/dev/null) || return 0
	t0=$(date +%s)
	kill "-$1" "$pid" 2>/dev/null
	if gone_within "$pid" "$EXIT_S"; then
		took=$(( $(date +%s) - t0 ))
		[ "$took" -lt 5 ] || echo "daemon.sh: vmtrackd took $took s to exit at SIG$1" >&2
		rm -f "$pidfile"
		return 0
	fi
	describe "$pid" "still runs $EXIT_S s after SIG$1"
	if [ "$1" != KILL ]; then
		echo "daemon.sh: killing it (SIGKILL)" >&2
		kill -KILL "$pid" 2>/dev/null
		if gone_within "$pid" 10; then
			rm -f "$pidfile"
			return 1
		fi
		describe "$pid" "survives SIGKILL by 10 s (stuck in the kernel)"
	fi
	return 1
}

case $what in
start) start "$@" ;;
stop) stop TERM ;;
crash) stop KILL ;;
restart) stop TERM && start "$@" ;;
*) echo "daemon.sh: start|stop|crash|restart" >&2; exit 2 ;;
esac
