#!/bin/sh
# redis stopped and its data directory /var/lib/redis gone (moved away, as a cleanup or a failed restore leaves it):
# every start fails with `*** FATAL CONFIG FILE ERROR *** >>> 'dir /var/lib/redis' No such file or directory`. No
# runbook of redis's own covers it: the class service-directory-missing recreates the directory as the package made it.
# The old directory waits in /var/lib/redis.lab-gone and comes back with undo.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

datadir=/var/lib/redis
aside=/var/lib/redis.lab-gone

case "${1:-}" in
break)
    if [ -e "$aside" ]; then
        echo "$aside exists: the fault is already in place" >&2
        exit 1
    fi
    service redis-server stop
    mv "$datadir" "$aside"
    if service redis-server start >/dev/null 2>&1 && redis_answers; then
        echo "redis started without $datadir" >&2
        exit 1
    fi
    echo "moved $datadir to $aside; redis is stopped and will not start"
    ;;
undo)
    if [ -e "$aside" ]; then
        service redis-server stop
        rm -rf "$datadir"
        mv "$aside" "$datadir"
    fi
    reset_failed redis-server
    start_until_answers redis-server redis_answers
    ;;
*)
    usage
    ;;
esac
