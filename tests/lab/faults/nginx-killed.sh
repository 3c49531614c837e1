#!/bin/sh
# nginx master and workers killed with SIGKILL; on a sysv host the stale /run/nginx.pid stays behind (systemd removes it).
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

case "${1:-}" in
break)
    master=$(running_pid /run/nginx.pid)
    workers=$(pgrep -d ' ' -P "$master" || true)
    kill -9 "$master"
    # a worker may already be gone (the cache loader exits on its own; workers die with their master)
    # shellcheck disable=SC2086 # one word per worker PID
    kill -9 $workers 2>/dev/null || true
    # shellcheck disable=SC2086
    wait_until all_gone "$master" $workers
    if [ -e /run/nginx.pid ]; then
        echo "killed nginx master $master and workers $workers; /run/nginx.pid still says $(cat /run/nginx.pid)"
    else  # systemd removes a PIDFile= of a unit whose main process died
        echo "killed nginx master $master and workers $workers; the service manager removed /run/nginx.pid"
    fi
    ;;
undo)
    start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
