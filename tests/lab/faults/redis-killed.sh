#!/bin/sh
# redis-server killed with SIGKILL; the stale /run/redis/redis-server.pid stays behind.
# Usage (as root inside a lab host): sh redis-killed.sh break|undo
set -eu

pidfile=/run/redis/redis-server.pid

wait_until() {
    for _ in $(seq 100); do
        if "$@"; then return 0; fi
        sleep 0.1
    done
    echo "timed out waiting for: $*" >&2
    return 1
}

redis_gone() {
    ! kill -0 "$1" 2>/dev/null
}

redis_answers() {
    [ "$(redis-cli ping 2>/dev/null)" = PONG ]
}

case "${1:-}" in
break)
    pid=$(cat "$pidfile" 2>/dev/null || true)
    if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
        echo "redis-server is not running: nothing to kill" >&2
        exit 1
    fi
    kill -9 "$pid"
    wait_until redis_gone "$pid"
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
