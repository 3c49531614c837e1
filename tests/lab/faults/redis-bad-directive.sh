#!/bin/sh
# A person added a directive redis does not know to its configuration and restarted it, on any host: the restart
# fails (on systemd, the unit's Restart=always restarts it until its start limit stops it). The good configuration is
# kept in /var/backups/lab-redis-bad-directive.conf: a test puts it back as a person would, without starting redis.
set -eu

conf=/etc/redis/redis.conf
backup=/var/backups/lab-redis-bad-directive.conf

case "${1:-}" in
break)
    if [ ! -e "$backup" ]; then
        cp -p "$conf" "$backup"
    fi
    echo "lab-unknown-directive yes" >> "$conf"
    if [ -d /run/systemd/system ]; then
        restart_into_its_limit redis-server
    else
        service redis-server stop
        if service redis-server start >/dev/null 2>&1 && wait_until redis_answers 2>/dev/null; then
            echo "redis-server started with an unknown directive" >&2
            exit 1
        fi
    fi
    echo "added an unknown directive to $conf: redis-server is down and will not start"
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
