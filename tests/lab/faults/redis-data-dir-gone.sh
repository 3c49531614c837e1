#!/bin/sh
# redis stopped and its data directory /var/lib/redis gone (moved away, as a cleanup or a failed restore leaves it):
# every start fails with `*** FATAL CONFIG FILE ERROR *** >>> 'dir /var/lib/redis' No such file or directory`. No
# runbook of redis's own covers it: the class service-directory-missing recreates the directory as the package made it.
# The old directory waits in /var/lib/redis.lab-gone and comes back with undo.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

case "${1:-}" in
break)
    set_aside redis-server /var/lib/redis /var/lib/redis.lab-gone
    if service redis-server start >/dev/null 2>&1 && redis_answers; then
        echo "redis started without /var/lib/redis" >&2
        exit 1
    fi
    echo "moved /var/lib/redis to /var/lib/redis.lab-gone; redis is stopped and will not start"
    ;;
undo)
    put_back redis-server /var/lib/redis /var/lib/redis.lab-gone redis_answers
    ;;
*)
    usage
    ;;
esac
