#!/bin/sh
# /run/postgresql given to root (recreated by hand, or a tmpfiles rule with the wrong owner) and postgres restarted:
# Debian's pg_ctlcluster only makes the directory when it is missing, so the server starts, cannot create its socket's
# lock file and stops: `FATAL: could not create lock file "/var/run/postgresql/.s.PGSQL.5432.lock": Permission denied`.
# No runbook of postgres's own covers it: the class service-directory-permissions gives the declared directory back
# the owner its package gave it.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

rundir=/run/postgresql

case "${1:-}" in
break)
    stop_answering_postgres
    chown root:root "$rundir"
    if service postgresql start >/dev/null 2>&1 && postgres_answers; then
        echo "postgres started with $rundir owned by root" >&2
        exit 1
    fi
    echo "$rundir is root's; postgres is stopped and will not start"
    ;;
undo)
    chown postgres:postgres "$rundir"
    chmod 2775 "$rundir"
    reset_failed "$postgres_unit"
    start_until_answers postgresql postgres_answers
    ;;
*)
    usage
    ;;
esac
