#!/bin/sh
# The cluster's data directory opened up to mode 0755 (a chmod -R that went too far) and postgres restarted: it
# refuses to start, "data directory ... has invalid permissions".
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

data=$postgres_data

case "${1:-}" in
break)
    service postgresql stop
    chmod 0755 "$data"
    if service postgresql start >/dev/null 2>&1 && postgres_answers; then
        echo "postgres started with $data at mode 0755" >&2
        exit 1
    fi
    echo "chmod 0755 $data; postgres is stopped and will not start"
    ;;
undo)
    chmod 0700 "$data"
    reset_failed "$postgres_unit"
    start_until_answers postgresql postgres_answers
    ;;
*)
    usage
    ;;
esac
