#!/bin/sh
# postgresql.conf made to include a file that was never shipped (include 'lab-tuning.conf'), and postgres restarted:
# it refuses to start, "could not open configuration file ... No such file or directory"; every start fails alike.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

conf=/etc/postgresql/15/main/postgresql.conf
marker="# lab fault postgres-include-missing"

case "${1:-}" in
break)
    printf "include 'lab-tuning.conf'  %s\n" "$marker" >> "$conf"
    if service postgresql restart >/dev/null 2>&1 && postgres_answers; then
        echo "postgres started without lab-tuning.conf" >&2
        exit 1
    fi
    echo "postgresql.conf includes lab-tuning.conf, which does not exist; postgres is stopped and will not start"
    ;;
undo)
    sed -i "/$marker/d" "$conf"
    if [ -d /run/systemd/system ]; then systemctl reset-failed postgresql@15-main || true; fi
    start_until_answers postgresql postgres_answers
    ;;
*)
    usage
    ;;
esac
