#!/bin/sh
# A configuration change with an invalid value (shared_buffers = 'lots') and a restart: postgres refuses to start
# and says which file, which parameter and which value; every restart fails the same way.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

conf=/etc/postgresql/15/main/postgresql.conf
marker="# lab fault postgres-bad-parameter"

case "${1:-}" in
break)
    printf "shared_buffers = 'lots'  %s\n" "$marker" >> "$conf"
    if service postgresql restart >/dev/null 2>&1 && postgres_answers; then
        echo "postgres started with shared_buffers = 'lots'" >&2
        exit 1
    fi
    echo "added shared_buffers = 'lots' to $conf; postgres is stopped and will not start"
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
