#!/bin/sh
# A directive redis does not know (lab-bad-directive yes) added to /etc/redis/redis.conf and redis restarted: redis
# refuses its configuration ("Bad directive or wrong number of arguments") and never starts. On a sysv host Debian's
# init script still exits 0 ("redis-server is not running ... failed!" is all a status says); on a systemd host the
# unit's Restart=always restarts it until its start limit stops it.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

conf=/etc/redis/redis.conf
backup=/var/backups/lab-redis-bad-directive.conf

case "${1:-}" in
break)
    if [ ! -e "$backup" ]; then
        cp -p "$conf" "$backup"
    fi
    echo "lab-bad-directive yes" >> "$conf"
    since=$(date +%s)
    service redis-server restart >/dev/null 2>&1 || true
    if [ -d /run/systemd/system ]; then
        wait_until stopped_by_its_limit redis-server "$since"
    fi
    if redis_answers; then
        echo "redis-server answers with lab-bad-directive in $conf" >&2
        exit 1
    fi
    echo "added lab-bad-directive to $conf and restarted redis-server: it refuses its configuration and is not running"
    ;;
undo)
    if [ -e "$backup" ]; then
        cp -p "$backup" "$conf"
        rm "$backup"
    fi
    reset_failed redis-server
    start_until_answers redis-server redis_answers
    ;;
*)
    usage
    ;;
esac
