#!/bin/sh
# A unit's main process killed with SIGKILL each time its Restart= brings it back, until systemd gives up on its start
# limit (systemd hosts): SERVICE PORT [keep-killing]. Every run ended killed, none failed of its own: the unit is
# failed (result signal, NRestarts above 0) and its journal holds only systemd's bookkeeping. Then the killer is gone,
# or with keep-killing it stays (its PID in /run/lab-killer.pid) and kills each new main process: the cause is present.
# Run as root inside a lab host by fleet.py (fault HOST NAME SERVICE PORT [keep-killing] [--undo]), after _lib.sh
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

action=${1:-}
shift || true
of_service "$@"
keep=${3:-}

kill_main_process() {
    pid=$(systemctl show "$service_name" --property=MainPID --value)
    if [ "$pid" -gt 1 ]; then kill -9 "$pid" 2>/dev/null || true; fi
}

kill_each_start() {
    kill_main_process
    stopped_by_its_limit "$service_name" "$since"
}

case "$action" in
break)
    require_systemd service-killed-into-start-limit
    wait_until service_answers
    since=$(date +%s)
    wait_until kill_each_start
    echo "killed $service_name at each of its $(systemctl show "$service_name" --property=NRestarts --value) restarts until its start" \
         "limit; result $(systemctl show "$service_name" --property=Result --value)"
    if [ "$keep" = keep-killing ]; then
        setsid sh -c "while :; do pid=\$(systemctl show '$service_name' --property=MainPID --value); \
            [ \"\$pid\" -gt 1 ] && kill -9 \"\$pid\"; sleep 0.2; done" </dev/null >/dev/null 2>&1 &
        echo $! > "$killer_pidfile"
        echo "the killer stays: PID $!"
    fi
    ;;
undo)
    stop_killer
    restart_answering
    ;;
*)
    usage
    ;;
esac
