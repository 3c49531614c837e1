#!/bin/sh
# redis stopped and its log directory /var/log/redis recreated by hand as root (root:root 0755, as `mkdir` leaves it):
# redis, which runs as redis, cannot create its log, and every start fails with `*** FATAL CONFIG FILE ERROR ***
# Can't open the log file: Permission denied`. No runbook of redis's own covers it: the class
# service-directory-permissions gives the directory back the owner, group and mode the package gave it.
# The old directory waits in /var/log/redis.lab-aside and comes back with undo.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

case "${1:-}" in
break)
    set_aside redis-server /var/log/redis /var/log/redis.lab-aside
    mkdir -m 0755 /var/log/redis
    if service redis-server start >/dev/null 2>&1 && redis_answers; then
        echo "redis started with /var/log/redis owned by root" >&2
        exit 1
    fi
    echo "/var/log/redis is root:root 0755; redis is stopped and will not start"
    ;;
undo)
    put_back redis-server /var/log/redis /var/log/redis.lab-aside redis_answers
    ;;
*)
    usage
    ;;
esac
