#!/bin/sh
# nginx stopped and port 80 taken by another process, so `service nginx start` fails.
# The squatter is `python3 -m http.server 80`, PID in /run/lab-squatter.pid.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

case "${1:-}" in
break)
    squat_port_of nginx 80 nginx_answers
    ;;
undo)
    unsquat
    start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
