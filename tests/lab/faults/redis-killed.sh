#!/bin/sh
# redis-server killed with SIGKILL; the stale /run/redis/redis-server.pid stays behind.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

pidfile=/run/redis/redis-server.pid

case "${1:-}" in
break)
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
        echo "redis-server is not running: nothing to kill" >&2
        exit 1
    fi
    kill -9 "$pid"
    wait_until all_gone "$pid"
    echo "killed redis-server $pid; $pidfile left behind"
    ;;
undo)
    if ! redis_answers; then
        service redis-server start
    fi
    wait_until redis_answers
    ;;
*)
    echo "usage: $0 break|undo" >&2
    exit 2
    ;;
esac
