#!/bin/sh
# redis stopped and port 6379 taken by another process, so redis cannot bind it (no runbook of redis's own covers it).
# The squatter is `python3 -m http.server 6379`, PID in /run/lab-squatter.pid.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

case "${1:-}" in
break)
    squat_port_of redis-server 6379 redis_answers
    ;;
undo)
    unsquat
    reset_failed redis-server
    start_until_answers redis-server redis_answers
    ;;
*)
    usage
    ;;
esac
