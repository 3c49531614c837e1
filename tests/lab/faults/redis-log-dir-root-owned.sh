#!/bin/sh
# redis stopped and its log directory /var/log/redis recreated by hand as root (root:root 0755, as `mkdir` leaves it):
# redis, which runs as redis, cannot create its log, and every start fails with `*** FATAL CONFIG FILE ERROR ***
# Can't open the log file: Permission denied`. No runbook of redis's own covers it: the class
# service-directory-permissions gives the directory back the owner, group and mode the package gave it.
# The old directory waits in /var/log/redis.lab-aside and comes back with undo.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

logdir=/var/log/redis
aside=/var/log/redis.lab-aside

case "${1:-}" in
break)
    if [ -e "$aside" ]; then
        echo "$aside exists: the fault is already in place" >&2
        exit 1
    fi
    service redis-server stop
    mv "$logdir" "$aside"
    mkdir -m 0755 "$logdir"
    if service redis-server start >/dev/null 2>&1 && redis_answers; then
        echo "redis started with $logdir owned by root" >&2
        exit 1
    fi
    echo "$logdir is root:root 0755; redis is stopped and will not start"
    ;;
undo)
    if [ -e "$aside" ]; then
        service redis-server stop
        rm -rf "$logdir"
        mv "$aside" "$logdir"
    fi
    reset_failed redis-server
    start_until_answers redis-server redis_answers
    ;;
*)
    usage
    ;;
esac
