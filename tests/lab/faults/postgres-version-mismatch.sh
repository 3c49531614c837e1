#!/bin/sh
# The cluster's data directory says it was made by another major version (PG_VERSION 14, as a restore of the wrong
# backup leaves it), and the server restarted: it refuses with "database files are incompatible with server" and, on
# the next line, the DETAIL that says which versions. No restart fixes it: a person restores or upgrades.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

version=$postgres_data/PG_VERSION

case "${1:-}" in
break)
    stop_answering_postgres
    echo 14 > "$version"
    if service postgresql start >/dev/null 2>&1 && postgres_answers; then
        echo "postgresql started with PG_VERSION 14" >&2
        exit 1
    fi
    echo "PG_VERSION says 14: postgresql $postgresql_version refuses the data directory"
    ;;
undo)
    echo "$postgresql_version" > "$version"
    chown postgres:postgres "$version"
    if [ -d /run/systemd/system ]; then
        systemctl reset-failed "$postgres_unit" 2>/dev/null || true
    fi
    start_until_answers postgresql postgres_answers
    ;;
*)
    usage
    ;;
esac
