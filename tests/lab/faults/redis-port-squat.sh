#!/bin/sh
# redis stopped and port 6379 taken by another process, so redis cannot bind it (no runbook of redis's own covers it).
# The squatter is `python3 -m http.server 6379`, PID in /run/lab-squatter.pid.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

case "${1:-}" in
break)
    if squatter=$(running_squatter); then
        echo "a port is already squatted by PID $squatter" >&2
        exit 1
    fi
    rm -f "$squatter_pidfile"
    service redis-server stop
    wait_until port_free 6379
    squat_port 6379
    if service redis-server start >/dev/null 2>&1 && redis_answers; then
        echo "redis started although port 6379 is taken" >&2
        exit 1
    fi
    echo "port 6379 squatted by PID $(cat "$squatter_pidfile") (python3 -m http.server); redis cannot start"
    ;;
undo)
    unsquat
    reset_failed redis-server
    start_until_answers redis-server redis_answers
    ;;
*)
    usage
    ;;
esac
