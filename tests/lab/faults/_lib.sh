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

# The release's PostgreSQL cluster (15 on bookworm, 17 on trixie): its version, data directory and unit.
postgresql_version=
for cluster_dir in /etc/postgresql/*/main; do
    [ -d "$cluster_dir" ] && postgresql_version=$(basename "$(dirname "$cluster_dir")")
done
postgres_data=/var/lib/postgresql/$postgresql_version/main
postgres_unit=postgresql@$postgresql_version-main

postgres_answers() {
    # As postgres, so the server does not log a failed login for every probe.
    runuser -u postgres -- pg_isready -q
}

postgres_gone() {
    [ ! -e "$postgres_data/postmaster.pid" ] && [ ! -e /run/postgresql/.s.PGSQL.5432.lock ]
}

# Stop the PostgreSQL cluster, which must answer (otherwise fail: nothing to break), and wait until it removed its pid
# file and its socket's lock: on systemd hosts the stop of the wrapper returns while the cluster is still at it.
stop_answering_postgres() {
    if ! postgres_answers; then
        echo "postgresql is not running" >&2
        return 1
    fi
    service postgresql stop
    wait_until postgres_gone
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

# On a systemd host, forget a unit's failures (its start limit too); a sysv host has none to forget.
reset_failed() {
    if [ -d /run/systemd/system ]; then systemctl reset-failed "$1" || true; fi
}

# Whether SERVICE, just started, answers (CHECK) and still does once its own restarts had time to show: a unit that
# systemd restarts itself (Restart=always, memcached's) is active for a moment before each failure.
still_answering() {
    "$2" || return 1
    if [ -d /run/systemd/system ] && [ "$(systemctl show -p Restart --value "$1")" != no ]; then
        sleep 2
        "$2"
    fi
}

# Whether systemd gave up restarting UNIT on its start limit since the epoch second SINCE. After its own restarts
# (Restart=) systemd keeps the failed run's result (exit-code), not start-limit-hit, and between two restarts the unit
# is failed for a moment too: only the journal says that it gave up.
stopped_by_its_limit() {
    journalctl -u "$1" --since="@$2" --no-pager -o cat | grep -q "Start request repeated too quickly"
}

# Restart UNIT, which must fail, and wait until systemd stops restarting it (Restart=) on its start limit; when the
# restart succeeds, say so and fail: nothing is broken.
restart_into_its_limit() {
    since=$(date +%s)
    if systemctl restart "$1" 2>/dev/null; then
        echo "$1 started: nothing is broken" >&2
        return 1
    fi
    wait_until stopped_by_its_limit "$1" "$since"
}

# After a change to UNIT's unit or package (systemd hosts): systemd reloads, and a restart of UNIT must fail; when it
# succeeds, say it started DESPITE what the fault did, and fail.
reload_and_fail_to_restart() {
    systemctl daemon-reload
    if systemctl restart "$1" 2>/dev/null; then
        echo "$1 started $2" >&2
        exit 1
    fi
}

# Faults that only systemd has (FAULT: the script's name): on any other host, say so and stop (exit 2), changing nothing.
require_systemd() {
    if [ ! -d /run/systemd/system ]; then
        echo "$1 works on systemd hosts only; this host's PID 1 is $(cat /proc/1/comm 2>/dev/null || echo unknown)" >&2
        exit 2
    fi
}

# Stop the init script UNIT, remove DIRECTORY, and make sure UNIT no longer starts.
remove_directory_of() {
    service "$1" stop
    rm -rf "$2"
    if service "$1" start >/dev/null 2>&1; then
        echo "$1 started without $2" >&2
        exit 1
    fi
}

# Stop the init script UNIT and move DIRECTORY to ASIDE (a fault that is already in place, ASIDE existing, fails):
# what a person's cleanup or a failed restore leaves. The fault's script makes sure UNIT no longer starts.
set_aside() {
    if [ -e "$3" ]; then
        echo "$3 exists: the fault is already in place" >&2
        exit 1
    fi
    service "$1" stop
    mv "$2" "$3"
}

# Put DIRECTORY back from ASIDE (whatever a heal made in its place goes) and start UNIT until PROBE answers.
put_back() {
    if [ -e "$3" ]; then
        service "$1" stop
        rm -rf "$2"
        mv "$3" "$2"
    fi
    reset_failed "$1"
    start_until_answers "$1" "$4"
}

port_taken() {
    [ -n "$(ss -Hltn "sport = :$1")" ]
}

port_free() {
    ! port_taken "$1"
}

squatter_pidfile=/run/lab-squatter.pid

# A stray `python3 -m http.server PORT` takes the port (its service must be stopped); its PID goes to $squatter_pidfile.
# It runs as nobody, allowed to bind a port below 1024, as a stray server does: a process of root's outside the
# service's unit is protected from the loop (it may be a daemon of the host), and that case needs a person.
squat_port() {
    setsid setpriv --reuid=nobody --regid=nogroup --clear-groups --inh-caps=+net_bind_service --ambient-caps=+net_bind_service \
        python3 -m http.server "$1" --bind 0.0.0.0 --directory /srv </dev/null >/dev/null 2>&1 &
    echo $! > "$squatter_pidfile"
    wait_until port_taken "$1"
}

# The squatter's PID while it still runs (a healed host killed it, and its PID may be reused by now).
running_squatter() {
    squatter=$(head -n 1 "$squatter_pidfile" 2>/dev/null || true)
    [ -n "$squatter" ] && grep -q http.server "/proc/$squatter/cmdline" 2>/dev/null && echo "$squatter"
}

# Stop the init script UNIT, let a stray `python3 -m http.server PORT` take its port, and make sure UNIT no longer
# starts (PROBE, which says it answers, fails).
squat_port_of() {
    if squatter=$(running_squatter); then
        echo "a port is already squatted by PID $squatter" >&2
        exit 1
    fi
    rm -f "$squatter_pidfile"
    service "$1" stop
    wait_until port_free "$2"
    squat_port "$2"
    if service "$1" start >/dev/null 2>&1 && still_answering "$1" "$3"; then
        echo "$1 started although port $2 is taken" >&2
        exit 1
    fi
    echo "port $2 squatted by PID $(cat "$squatter_pidfile") (python3 -m http.server); $1 cannot start"
}

# Stop the squatter, if it still runs, and forget it.
unsquat() {
    if squatter=$(running_squatter); then
        kill "$squatter"
        wait_until all_gone "$squatter"
    fi
    rm -f "$squatter_pidfile"
}

postgres_conf=/etc/postgresql/$postgresql_version/main/postgresql.conf

# Append LINE, tagged with MARKER, to postgresql.conf and restart: postgres must refuse to start.
break_postgres_conf() {
    printf "%s  %s\n" "$1" "$2" >> "$postgres_conf"
    if service postgresql restart >/dev/null 2>&1 && postgres_answers; then
        echo "postgres started with: $1" >&2
        exit 1
    fi
}

# Remove the lines tagged with MARKER from postgresql.conf and start postgres again.
mend_postgres_conf() {
    sed -i "/$1/d" "$postgres_conf"
    reset_failed "$postgres_unit"
    start_until_answers postgresql postgres_answers
}

# ---- faults of a class: the service (its init script or unit) and what is broken of it are the script's arguments

# The service a fault of a class breaks: `service_answers` then says whether it runs (its init script's status) and
# listens on its port. Without a service, the script's usage.
of_service() {
    if [ "$#" -lt 2 ]; then
        echo "usage: $0 break|undo SERVICE PORT ..." >&2
        exit 2
    fi
    service_name=$1 service_port=$2
}

service_answers() {
    service "$service_name" status >/dev/null 2>&1 && port_taken "$service_port"
}

# After a fault, the service's start must fail (or it must not answer): else say it started despite WHAT, and fail.
start_must_fail() {
    if service "$service_name" start >/dev/null 2>&1 && wait_until service_answers 2>/dev/null && still_answering "$service_name" service_answers; then
        echo "$service_name started despite $1" >&2
        exit 1
    fi
}

# Where faults of a class keep what they put back (a file's good version, a directory's owner and mode).
# shellcheck disable=SC2034  # the faults' scripts, which fleet.py runs after this file, use it
kept_dir=/var/lib/lab-faults

# The service's start failures forgotten and the service started until it answers.
# a killer a fault leaves behind on the host (its PID in $killer_pidfile), stopped by the fault's undo
killer_pidfile=/run/lab-killer.pid

stop_killer() {
    if [ -e "$killer_pidfile" ]; then
        kill "$(cat "$killer_pidfile")" 2>/dev/null || true
        rm -f "$killer_pidfile"
    fi
}

restart_answering() {
    reset_failed "$service_name"
    start_until_answers "$service_name" service_answers
}
