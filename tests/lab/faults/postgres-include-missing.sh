#!/bin/sh
# postgresql.conf made to include a file that was never shipped (include 'lab-tuning.conf'), and postgres restarted:
# it refuses to start, "could not open configuration file ... No such file or directory"; every start fails alike.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

marker="# lab fault postgres-include-missing"

case "${1:-}" in
break)
    break_postgres_conf "include 'lab-tuning.conf'" "$marker"
    echo "postgresql.conf includes lab-tuning.conf, which does not exist; postgres is stopped and will not start"
    ;;
undo)
    mend_postgres_conf "$marker"
    ;;
*)
    usage
    ;;
esac
