#!/bin/sh
# A configuration change with an invalid value (shared_buffers = 'lots') and a restart: postgres refuses to start
# and says which file, which parameter and which value; every restart fails the same way.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

marker="# lab fault postgres-bad-parameter"

case "${1:-}" in
break)
    break_postgres_conf "shared_buffers = 'lots'" "$marker"
    echo "added shared_buffers = 'lots' to $postgres_conf; postgres is stopped and will not start"
    ;;
undo)
    mend_postgres_conf "$marker"
    ;;
*)
    usage
    ;;
esac
