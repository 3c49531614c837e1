#!/bin/sh
# PostgreSQL's data directory chowned to root (a restore done as root); the cluster will not start.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

datadir=$postgres_data

not_all_postgres() {
    [ -n "$(find "$datadir" ! -user postgres -print -quit)" ] || [ -n "$(find "$datadir" ! -group postgres -print -quit)" ]
}

case "${1:-}" in
break)
    stop_answering_postgres
    chown -R root:root "$datadir"
    # on systemd hosts the start of Debian's postgresql wrapper succeeds while its cluster's unit fails
    service postgresql start || true
    if postgres_answers; then
        echo "postgresql started with a data directory owned by root" >&2
        exit 1
    fi
    echo "$datadir is owned by root; postgresql is stopped and will not start"
    ;;
undo)
    if not_all_postgres; then
        chown -R postgres:postgres "$datadir"
    fi
    start_until_answers postgresql postgres_answers
    ;;
*)
    usage
    ;;
esac
