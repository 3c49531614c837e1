#!/bin/sh
# redis in its own restart loop (systemd hosts): a directive redis does not know was added to its
# configuration and redis restarted. Every start fails; the unit's Restart=always restarts it
# every 100 ms until its start limit stops it (failed, NRestarts above 0).
set -eu

conf=/etc/redis/redis.conf
backup=/var/backups/lab-redis.conf

case "${1:-}" in
break)
    if [ ! -e "$backup" ]; then
        cp -p "$conf" "$backup"
    fi
    echo "lab-unknown-directive yes" >> "$conf"
    since=$(date +%s)
    systemctl restart redis-server 2>/dev/null || true
    wait_until stopped_by_its_limit redis-server "$since"
    echo "added an unknown directive to $conf: redis-server failed $(systemctl show redis-server --property=NRestarts --value) restarts and hit its start limit"
    ;;
undo)
    if [ -e "$backup" ]; then
        cp -p "$backup" "$conf"
        rm "$backup"
    fi
    systemctl reset-failed redis-server
    start_until_answers redis-server redis_answers
    ;;
*)
    usage
    ;;
esac
