#!/bin/sh
# A person ran systemctl stop postgresql: Debian's umbrella unit (ExecStart=/bin/true) and the cluster it fronts,
# postgresql@15-main (PartOf=postgresql.service), both stop (systemd hosts). A heal starts the cluster's own unit; the
# umbrella stays inactive, and is up when the cluster it fronts is.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

require_systemd postgres-umbrella-stopped

case "${1:-}" in
break)
    if ! postgres_answers; then
        echo "postgresql is not running: nothing to break" >&2
        exit 1
    fi
    systemctl stop postgresql.service
    wait_until postgres_gone
    echo "postgresql.service stopped, and $postgres_unit with it"
    ;;
undo)
    systemctl start postgresql.service
    wait_until postgres_answers
    ;;
*)
    usage
    ;;
esac
