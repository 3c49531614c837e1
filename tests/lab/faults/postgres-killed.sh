#!/bin/sh
# PostgreSQL postmaster killed with SIGKILL; postmaster.pid stays behind, its children exit.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

pidfile=$postgres_data/postmaster.pid

case "${1:-}" in
break)
    postmaster=$(running_pid "$pidfile")
    children=$(pgrep -d ' ' -P "$postmaster" || true)
    kill -9 "$postmaster"
    # shellcheck disable=SC2086 # one word per child PID
    wait_until all_gone "$postmaster" $children
    echo "killed postmaster $postmaster; its children $children are gone; $pidfile left behind"
    ;;
undo)
    start_until_answers postgresql postgres_answers
    ;;
*)
    usage
    ;;
esac
