#!/bin/sh
# nginx stopped and port 80 taken by another process, so `service nginx start` fails.
# The squatter is `python3 -m http.server 80`, PID in /run/lab-squatter.pid.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

squatter_pidfile=/run/lab-squatter.pid

port_80_taken() {
    [ -n "$(ss -Hltn 'sport = :80')" ]
}

port_80_free() {
    ! port_80_taken
}

case "${1:-}" in
break)
    if [ -s "$squatter_pidfile" ]; then
        echo "port 80 is already squatted by PID $(cat "$squatter_pidfile")" >&2
        exit 1
    fi
    service nginx stop
    wait_until port_80_free
    setsid python3 -m http.server 80 --bind 0.0.0.0 --directory /srv </dev/null >/dev/null 2>&1 &
    echo $! > "$squatter_pidfile"
    wait_until port_80_taken
    if service nginx start; then
        echo "nginx started although port 80 is taken" >&2
        exit 1
    fi
    echo "port 80 squatted by PID $(cat "$squatter_pidfile") (python3 -m http.server); nginx cannot start"
    ;;
undo)
    if [ -s "$squatter_pidfile" ]; then
        squatter=$(cat "$squatter_pidfile")
        if grep -q http.server "/proc/$squatter/cmdline" 2>/dev/null; then
            kill "$squatter"
            wait_until port_80_free
        fi
        rm -f "$squatter_pidfile"
    fi
    start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
