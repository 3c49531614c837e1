#!/bin/sh
# PostgreSQL postmaster killed with SIGKILL; postmaster.pid stays behind, its children exit.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

pidfile=/var/lib/postgresql/15/main/postmaster.pid

case "${1:-}" in
break)
    postmaster=$(head -n 1 "$pidfile" 2>/dev/null || true)
    if [ -z "$postmaster" ] || ! kill -0 "$postmaster" 2>/dev/null; then
        echo "postgresql is not running: nothing to kill" >&2
        exit 1
    fi
    children=$(pgrep -d ' ' -P "$postmaster" || true)
    kill -9 "$postmaster"
    # shellcheck disable=SC2086 # one word per child PID
    wait_until all_gone "$postmaster" $children
    echo "killed postmaster $postmaster; its children $children are gone; $pidfile left behind"
    ;;
undo)
    if ! postgres_answers; then
        service postgresql start
    fi
    wait_until postgres_answers
    ;;
*)
    echo "usage: $0 break|undo" >&2
    exit 2
    ;;
esac
