#!/bin/sh
# A service stopped and its port taken by a stray `python3 -m http.server PORT` (as nobody), so its start fails:
# SERVICE PORT. The squatter's PID is in /run/lab-squatter.pid.
# Run as root inside a lab host by fleet.py (fault HOST NAME SERVICE PORT [--undo]), after _lib.sh
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

action=${1:-}
shift || true
of_service "$@"

case "$action" in
break)
    squat_port_of "$service_name" "$service_port" service_answers
    ;;
undo)
    unsquat
    restart_answering
    ;;
*)
    usage
    ;;
esac
