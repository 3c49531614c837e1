#!/bin/sh
# nginx's master alone killed with SIGKILL: its workers live on, parentless, and hold :80; on a sysv host the stale
# /run/nginx.pid stays behind. On systemd the unit's cgroup goes with its main process (KillMode=mixed).
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

case "${1:-}" in
break)
    master=$(running_pid /run/nginx.pid)
    workers=$(pgrep -d ' ' -P "$master" || true)
    kill -9 "$master"
    wait_until all_gone "$master"
    echo "killed nginx master $master; its workers $workers were left to hold the port"
    ;;
undo)
    pkill -9 -x nginx || true
    rm -f /run/nginx.pid
    start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
