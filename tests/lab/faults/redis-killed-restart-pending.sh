#!/bin/sh
# redis-server killed on a host whose unit restarts it after 15 s (systemd hosts; a drop-in sets
# RestartSec=15s on Debian's Restart=always): for those seconds the unit is in auto-restart, and
# systemd brings redis back by itself.
set -eu

dropin=/etc/systemd/system/redis-server.service.d/lab-restart-sec.conf

restart_pending() {
    [ "$(systemctl show redis-server --property=SubState --value)" = auto-restart ]
}

case "${1:-}" in
break)
    pid=$(systemctl show redis-server --property=MainPID --value)
    if [ "$pid" -le 1 ]; then
        echo "redis-server is not running: nothing to kill" >&2
        exit 1
    fi
    mkdir -p "${dropin%/*}"
    printf '[Service]\nRestartSec=15s\n' > "$dropin"
    systemctl daemon-reload
    kill -9 "$pid"
    wait_until restart_pending
    echo "killed redis-server $pid; systemd restarts it in 15 s"
    ;;
undo)
    if [ -e "$dropin" ]; then
        remove_dropin "$dropin"
    fi
    start_until_answers redis-server redis_answers
    ;;
*)
    usage
    ;;
esac
