#!/bin/sh
# Two faults at once: nginx stopped, its log directory removed, and port 80 taken by a stray
# `python3 -m http.server 80` (PID in /run/lab-squatter.pid). Each fix alone leaves nginx down.
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
    service nginx stop
    wait_until port_80_free
    rm -rf /var/log/nginx
    setsid python3 -m http.server 80 --bind 0.0.0.0 --directory /srv </dev/null >/dev/null 2>&1 &
    echo $! > "$squatter_pidfile"
    wait_until port_80_taken
    echo "removed /var/log/nginx and squatted port 80 with PID $(cat "$squatter_pidfile"); nginx is stopped"
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
    [ -d /var/log/nginx ] || install -d -m 0755 -o root -g adm /var/log/nginx
    if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then systemctl reset-failed nginx; fi
    start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
