#!/bin/sh
# A service killed with SIGKILL now and DELAY seconds after each start, for as long as the fault stays (any init):
# SERVICE PORT PIDFILE DELAY. A killer on the host (its PID in /run/lab-killer.pid) reads the service's pid file; each
# new main process it finds there it kills, with its children, DELAY seconds later. A heal brings the service back and
# it holds through its settle window, then it fails again: what a repair that does not hold looks like.
# Run as root inside a lab host by fleet.py (fault HOST NAME SERVICE PORT PIDFILE DELAY [--undo]), after _lib.sh
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

action=${1:-}
shift || true
of_service "$@"
pidfile=${3:?usage: $0 break|undo SERVICE PORT PIDFILE DELAY}
delay=${4:?usage: $0 break|undo SERVICE PORT PIDFILE DELAY}

case "$action" in
break)
    wait_until service_answers
    main=$(running_pid "$pidfile")
    # the main process first, then its children: a live master (nginx's) starts new workers for killed ones
    children=$(pgrep -d ' ' -P "$main" || true)
    kill -9 "$main"
    # shellcheck disable=SC2086 # one word per child PID
    kill -9 $children 2>/dev/null || true
    # shellcheck disable=SC2086
    wait_until all_gone "$main" $children
    setsid sh -c "last=$main
        while :; do
            pid=\$(head -n 1 '$pidfile' 2>/dev/null || true)
            if [ -n \"\$pid\" ] && [ \"\$pid\" != \"\$last\" ] && kill -0 \"\$pid\" 2>/dev/null; then
                last=\$pid
                sleep '$delay'
                children=\$(pgrep -d ' ' -P \"\$pid\" || true)
                kill -9 \"\$pid\" 2>/dev/null || true
                kill -9 \$children 2>/dev/null || true
            fi
            sleep 0.2
        done" </dev/null >/dev/null 2>&1 &
    echo $! > "$killer_pidfile"
    echo "killed $service_name (PID $main); the killer (PID $!) kills each new process $pidfile names $delay s after it starts"
    ;;
undo)
    stop_killer
    restart_answering
    ;;
*)
    usage
    ;;
esac
