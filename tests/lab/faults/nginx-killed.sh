#!/bin/sh
# nginx master and workers killed with SIGKILL; the stale /run/nginx.pid stays behind.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

case "${1:-}" in
break)
    master=$(cat /run/nginx.pid 2>/dev/null || true)
    if [ -z "$master" ] || ! kill -0 "$master" 2>/dev/null; then
        echo "nginx is not running: nothing to kill" >&2
        exit 1
    fi
    workers=$(pgrep -d ' ' -P "$master" || true)
    # shellcheck disable=SC2086 # one word per worker PID
    kill -9 "$master" $workers
    # shellcheck disable=SC2086
    wait_until all_gone "$master" $workers
    echo "killed nginx master $master and workers $workers; /run/nginx.pid still says $(cat /run/nginx.pid)"
    ;;
undo)
    if ! nginx_answers; then
        service nginx start
    fi
    wait_until nginx_answers
    ;;
*)
    echo "usage: $0 break|undo" >&2
    exit 2
    ;;
esac
