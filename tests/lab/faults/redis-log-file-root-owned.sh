#!/bin/sh
# redis's log file made root's, mode 0600 (an editor or a restore run as root), its directory untouched: redis, which
# runs as redis, cannot open it, and every start fails with `Can't open the log file: Permission denied`. The directory
# is right; the file in it is not: the class service-file-ownership gives it back the owner and group the package gives
# everything in /var/log/redis.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

log=/var/log/redis/redis-server.log

case "${1:-}" in
break)
    service redis-server stop
    touch "$log"
    chown root:root "$log"
    chmod 0600 "$log"
    if service redis-server start >/dev/null 2>&1 && redis_answers; then
        echo "redis started with $log owned by root" >&2
        exit 1
    fi
    echo "$log is root:root 0600; redis is stopped and will not start"
    ;;
undo)
    chown redis:adm "$log"
    chmod 0640 "$log"
    if [ -d /run/systemd/system ]; then
        systemctl reset-failed redis-server 2>/dev/null || true
    fi
    start_until_answers redis-server redis_answers
    ;;
*)
    usage
    ;;
esac
