#!/bin/sh
# redis-server killed with SIGKILL; the stale /run/redis/redis-server.pid stays behind.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

pidfile=/run/redis/redis-server.pid

case "${1:-}" in
break)
    pid=$(running_pid "$pidfile")
    kill -9 "$pid"
    wait_until all_gone "$pid"
    echo "killed redis-server $pid; $pidfile left behind"
    ;;
undo)
    start_until_answers redis-server redis_answers
    ;;
*)
    usage
    ;;
esac
