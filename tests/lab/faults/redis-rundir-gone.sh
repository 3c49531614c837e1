#!/bin/sh
# /run/redis removed under a running redis-server; its init script loses track of it.
# redis keeps answering; `service redis-server status` says it is not running; a start or restart
# launches a second redis that cannot bind 6379 and exits.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

rundir=/run/redis
pidfile=$rundir/redis-server.pid

init_script_sees_redis() {
    service redis-server status >/dev/null 2>&1
}

healthy() {
    redis_answers && init_script_sees_redis
}

no_redis() {
    ! pgrep -x redis-server >/dev/null
}

case "${1:-}" in
break)
    pid=$(running_pid "$pidfile")
    rm -rf "$rundir"
    if init_script_sees_redis; then
        echo "service redis-server status still passes without $rundir" >&2
        exit 1
    fi
    if ! redis_answers; then
        echo "redis-server $pid stopped answering" >&2
        exit 1
    fi
    echo "removed $rundir under redis-server $pid: it still answers, its init script says it is not running"
    ;;
undo)
    if ! healthy; then
        # a redis-server the init script cannot see: stop it, then start redis properly
        if ! init_script_sees_redis; then
            pkill -TERM -x redis-server || true
            wait_until no_redis
        fi
        service redis-server start
    fi
    wait_until healthy
    ;;
*)
    usage
    ;;
esac
