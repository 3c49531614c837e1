#!/bin/sh
# redis stopped and its log directory /var/log/redis removed: every start fails with "Can't open the log file: No
# such file or directory" after redis names its logfile line.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

case "${1:-}" in
break)
    service redis-server stop
    rm -rf /var/log/redis
    if service redis-server start >/dev/null 2>&1 && redis_answers; then
        echo "redis started without /var/log/redis" >&2
        exit 1
    fi
    echo "removed /var/log/redis; redis is stopped and will not start"
    ;;
undo)
    [ -d /var/log/redis ] || install -d -m 2750 -o redis -g adm /var/log/redis
    reset_failed redis-server
    start_until_answers redis-server redis_answers
    ;;
*)
    usage
    ;;
esac
