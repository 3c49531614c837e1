#!/bin/sh
# Two faults at once: nginx stopped, its log directory removed, and port 80 taken by a stray
# `python3 -m http.server 80` (PID in /run/lab-squatter.pid). Each fix alone leaves nginx down.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

case "${1:-}" in
break)
    remove_directory_of nginx /var/log/nginx
    wait_until port_free 80
    squat_port 80
    echo "removed /var/log/nginx and squatted port 80 with PID $(cat "$squatter_pidfile"); nginx is stopped"
    ;;
undo)
    unsquat
    [ -d /var/log/nginx ] || install -d -m 0755 -o root -g adm /var/log/nginx
    reset_failed nginx
    start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
