#!/bin/sh
# nginx stopped and port 80 taken by another process, so `service nginx start` fails.
# The squatter is `python3 -m http.server 80`, PID in /run/lab-squatter.pid.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

case "${1:-}" in
break)
    if [ -s "$squatter_pidfile" ]; then
        echo "port 80 is already squatted by PID $(cat "$squatter_pidfile")" >&2
        exit 1
    fi
    service nginx stop
    wait_until port_80_free
    squat_port_80
    if service nginx start; then
        echo "nginx started although port 80 is taken" >&2
        exit 1
    fi
    echo "port 80 squatted by PID $(cat "$squatter_pidfile") (python3 -m http.server); nginx cannot start"
    ;;
undo)
    unsquat_port_80
    start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
