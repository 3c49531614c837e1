#!/bin/sh
# Every process of a service killed with SIGKILL (an OOM kill, a kill -9 by hand): SERVICE PORT PROCESS...
# Run as root inside a lab host by fleet.py (fault HOST NAME SERVICE PORT PROCESS... [--undo]), after _lib.sh
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

action=${1:-}
shift || true
of_service "$@"
shift 2

case "$action" in
break)
    [ "$#" -gt 0 ] || usage
    wait_until service_answers
    pids=$(for process in "$@"; do pgrep -x "$process" || true; done | tr '\n' ' ')
    # a process may end between pgrep and kill (a worker its master replaced): each is killed if it is still there
    killed=""
    for pid in $pids; do
        if kill -9 "$pid" 2>/dev/null; then killed="$killed $pid"; fi
    done
    if [ -z "$killed" ]; then
        echo "no process of $service_name ($*) to kill" >&2
        exit 1
    fi
    # shellcheck disable=SC2086
    wait_until all_gone $killed
    echo "killed $service_name's processes$killed"
    ;;
undo)
    restart_answering
    ;;
*)
    usage
    ;;
esac
