#!/bin/sh
# nginx stopped and port 80 taken by another process, so `service nginx start` fails.
# The squatter is `python3 -m http.server 80`, PID in /run/lab-squatter.pid.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

case "${1:-}" in
break)
    if squatter=$(running_squatter); then
        echo "port 80 is already squatted by PID $squatter" >&2
        exit 1
    fi
    rm -f "$squatter_pidfile"
    service nginx stop
    wait_until port_free 80
    squat_port 80
    if service nginx start; then
        echo "nginx started although port 80 is taken" >&2
        exit 1
    fi
    echo "port 80 squatted by PID $(cat "$squatter_pidfile") (python3 -m http.server); nginx cannot start"
    ;;
undo)
    unsquat
    start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
