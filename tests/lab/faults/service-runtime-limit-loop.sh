#!/bin/sh
# A Restart=always unit whose every run ends a few seconds after it started (systemd hosts): SERVICE PORT [SECONDS]. A
# drop-in sets RuntimeMaxSec=SECONDS (3 by default: a recycle meant as 3h, written as 3), Restart=always, RestartSec=1s
# and no start limit, as for a worker recycled on a schedule. systemd stops each run at its limit (result timeout) and
# starts the next a second later, forever: the unit is active in most snapshots, and a run outlasts a short settle
# window. With SECONDS over 10 (a slow loop: no minute holds three restarts) it returns once the first run started,
# NRestarts 0. Run as root inside a lab host by fleet.py (fault HOST NAME SERVICE PORT [SECONDS] [--undo]), after _lib.sh
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

action=${1:-}
shift || true
of_service "$@"
seconds=${3:-3}
unit=$(systemctl show "$service_name" --property=Id --value)
dropin=/etc/systemd/system/$unit.d/lab-runtime-limit.conf

restarted_three_times() {
    [ "$(journalctl -u "$unit" --since="@$since" --no-pager -o cat | grep -c "Scheduled restart job")" -ge 3 ]
}

case "$action" in
break)
    require_systemd service-runtime-limit-loop
    mkdir -p "${dropin%/*}"
    printf '[Unit]\nStartLimitIntervalSec=0\n\n[Service]\nRuntimeMaxSec=%s\nRestart=always\nRestartSec=1s\n' "$seconds" > "$dropin"
    systemctl daemon-reload
    since=$(date +%s)
    systemctl restart "$unit"
    if [ "$seconds" -le 10 ]; then
        wait_until restarted_three_times || wait_until restarted_three_times
    fi
    echo "added $dropin (RuntimeMaxSec=$seconds, Restart=always): systemd ends each run of $unit after $seconds s and starts" \
         "the next; restarted $(systemctl show "$unit" --property=NRestarts --value) times so far"
    ;;
undo)
    if [ -e "$dropin" ]; then
        remove_dropin "$dropin"
    fi
    systemctl stop "$unit" 2>/dev/null || true
    restart_answering
    ;;
*)
    usage
    ;;
esac
