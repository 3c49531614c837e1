# shellcheck shell=sh
# Functions every fault script may use; fleet.py puts this file in front of the script it runs.

wait_until() {
    for _ in $(seq 100); do
        if "$@"; then return 0; fi
        sleep 0.1
    done
    echo "timed out waiting for: $*" >&2
    return 1
}

all_gone() {
    for pid in "$@"; do
        if kill -0 "$pid" 2>/dev/null; then return 1; fi
    done
}

# The pid in the first line of PIDFILE, when that process runs; otherwise fail: nothing to break.
running_pid() {
    pid=$(head -n 1 "$1" 2>/dev/null || true)
    if [ -z "$pid" ] || ! kill -0 "$pid" 2>/dev/null; then
        echo "$1 names no running process: nothing to break" >&2
        return 1
    fi
    echo "$pid"
}

# Start the init script UNIT unless PROBE already succeeds, then wait until PROBE does.
start_until_answers() {
    if ! "$2"; then
        service "$1" start
    fi
    wait_until "$2"
}

usage() {
    echo "usage: $0 break|undo" >&2
    exit 2
}

nginx_answers() {
    service nginx status >/dev/null && curl -fs -o /dev/null --max-time 2 http://127.0.0.1/
}

postgres_answers() {
    # As postgres, so the server does not log a failed login for every probe.
    runuser -u postgres -- pg_isready -q
}

redis_answers() {
    [ "$(redis-cli ping 2>/dev/null)" = PONG ]
}

# A systemd drop-in a fault added: gone, its directory too when empty, and systemd told.
remove_dropin() {
    rm -f "$1"
    rmdir "${1%/*}" 2>/dev/null || true
    systemctl daemon-reload
}
