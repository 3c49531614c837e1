#!/bin/sh
# PostgreSQL postmaster killed with SIGKILL; postmaster.pid stays behind, its children exit.
# Usage (as root inside a lab host): sh postgres-killed.sh break|undo
set -eu

pidfile=/var/lib/postgresql/15/main/postmaster.pid

wait_until() {
    for _ in $(seq 100); do
        if "$@"; then return 0; fi
        sleep 0.1
    done
    echo "timed out waiting for: $*" >&2
    return 1
}

all_gone() {
    for pid in "$@"; do
        if kill -0 "$pid" 2>/dev/null; then return 1; fi
    done
}

postgres_answers() {
    # As postgres, so the server does not log a failed login for every probe.
    runuser -u postgres -- pg_isready -q
}

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
