#!/bin/sh
# redis-server's main process killed with SIGKILL each time its unit's Restart=always brings it back, until systemd
# gives up on its start limit (systemd hosts); then the killer is gone. Every run ended killed, none failed of its own:
# the unit is failed (result signal, NRestarts above 0) and its journal holds only systemd's bookkeeping.
set -eu

kill_each_start() {
    pid=$(systemctl show redis-server --property=MainPID --value)
    if [ "$pid" -gt 1 ]; then kill -9 "$pid" 2>/dev/null || true; fi
    stopped_by_its_limit redis-server "$since"
}

case "${1:-}" in
break)
    require_systemd redis-killed-into-start-limit
    since=$(date +%s)
    wait_until kill_each_start
    echo "killed redis-server at each of its $(systemctl show redis-server --property=NRestarts --value) restarts until its start limit;" \
         "result $(systemctl show redis-server --property=Result --value)"
    ;;
undo)
    systemctl reset-failed redis-server
    start_until_answers redis-server redis_answers
    ;;
*)
    usage
    ;;
esac
