#!/bin/sh
# /var/log/redis full (space and inodes) and redis restarted: it cannot create its log and will not start.
# The log partition is a 4 MB tmpfs with 13 inodes (named lab-redis-logs), mounted inside the host's
# own mount namespace and filled with rotated logs; the real /var/log/redis underneath is untouched
# and comes back with undo.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

logdir=/var/log/redis
line='1234:M 01 Jan 2026 00:00:00.000 * 1 changes in 3600 seconds. Saving...'

gave_up_since() {
    journalctl -u redis-server --since="@$1" --no-pager -o cat | grep -q "Start request repeated too quickly"
}

mounted() {
    grep -q "^lab-redis-logs $logdir " /proc/mounts
}

unmount() {
    # redis opens its log for every line it writes: retry the rare moment it holds it
    for _ in $(seq 50); do
        if umount "$logdir" 2>/dev/null; then return 0; fi
        sleep 0.1
    done
    umount "$logdir"
}

case "${1:-}" in
break)
    if mounted; then
        echo "$logdir is already the full lab partition" >&2
        exit 1
    fi
    if ! redis_answers; then
        echo "redis is not running" >&2
        exit 1
    fi
    # 13 inodes: the directory, twelve rotated logs; no room for a new redis-server.log
    mount -t tmpfs -o "size=4m,nr_inodes=13,mode=2750,uid=$(id -u redis),gid=$(getent group adm | cut -d: -f3)" lab-redis-logs "$logdir"
    # what Debian's logrotate for redis (weekly, rotate 12, compress, delaycompress) keeps: eleven
    # compressed weeks and last week's log, uncompressed, which filled the partition; the live log
    # was just rotated away
    for n in 2 3 4 5 6 7 8 9 10 11 12; do
        yes "$line" | head -n 20000 | gzip > "$logdir/redis-server.log.$n.gz"
    done
    yes "$line" > "$logdir/redis-server.log.1" 2>/dev/null || true
    chown redis:adm "$logdir"/redis-server.log.*
    chmod 0640 "$logdir"/redis-server.log.*
    since=$(date +%s)
    service redis-server restart >/dev/null 2>&1 || true
    if [ -d /run/systemd/system ]; then
        # Restart=always restarts it every 100 ms until its start limit stops it
        wait_until gave_up_since "$since"
    fi
    if redis_answers; then
        echo "redis-server still answers with a full $logdir" >&2
        exit 1
    fi
    echo "$logdir is full ($(df -P "$logdir" | awk 'NR == 2 {print $5}') of space, $(df -Pi "$logdir" | awk 'NR == 2 {print $5}') of inodes); redis-server will not start"
    ;;
undo)
    if mounted; then
        unmount
    fi
    # a systemd host: redis's Restart=always ran into its start limit while the partition was full
    if [ -d /run/systemd/system ]; then
        systemctl reset-failed redis-server
    fi
    start_until_answers redis-server redis_answers
    ;;
*)
    usage
    ;;
esac
