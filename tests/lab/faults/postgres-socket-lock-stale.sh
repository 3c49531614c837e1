#!/bin/sh
# PostgreSQL stopped with its socket and the socket's lock file left behind, the pid in the lock reused by another
# process of the postgres account (a long backup job: `sleep`, pid in /run/lab-pg-reused.pid). What a host or container
# restart leaves when the socket directory survives it (on persistent storage) and the pid the dead postmaster had
# now belongs to another of its account's programs: postgres refuses to start ("lock file
# "/run/postgresql/.s.PGSQL.5432.lock" already exists ... Is another postmaster (PID N) using socket file"). A pid of
# another account's process would not stop it: postgres cannot signal it, so takes it for no postmaster of its own.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

datadir=$postgres_data
socket=/run/postgresql/.s.PGSQL.5432
lock=$socket.lock
reused_pidfile=/run/lab-pg-reused.pid

case "${1:-}" in
break)
    stop_answering_postgres
    # setpriv execs, so $! is the sleeper itself
    setpriv --reuid postgres --regid postgres --init-groups sleep 86400 </dev/null >/dev/null 2>&1 &
    reused=$!
    echo "$reused" > "$reused_pidfile"
    # a socket file nothing has bound: bound by a process that exits without unlinking it, as a killed postmaster does
    runuser -u postgres -- python3 -c 'import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])' "$socket"
    # the lock file as postgres writes it: the postmaster's pid, its data directory, the start time, the port
    printf '%s\n%s\n%s\n5432\n' "$reused" "$datadir" "$(date +%s)" > "$lock"
    chown postgres:postgres "$lock"
    chmod 0600 "$lock"
    # on systemd hosts the start of Debian's postgresql wrapper succeeds while its cluster's unit fails
    service postgresql start || true
    if postgres_answers; then
        echo "postgresql started past a lock file naming pid $reused" >&2
        exit 1
    fi
    echo "left $socket and $lock naming pid $reused (sleep, as postgres); postgresql will not start"
    ;;
undo)
    if [ -e "$lock" ] && [ "$(cat "/proc/$(head -n 1 "$lock")/comm" 2>/dev/null)" != postgres ]; then
        rm -f "$lock" "$socket"
    fi
    if [ -e "$reused_pidfile" ]; then
        kill "$(cat "$reused_pidfile")" 2>/dev/null || true
        rm -f "$reused_pidfile"
    fi
    reset_failed "$postgres_unit"
    start_until_answers postgresql postgres_answers
    ;;
*)
    usage
    ;;
esac
