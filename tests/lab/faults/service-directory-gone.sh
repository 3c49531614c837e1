#!/bin/sh
# A directory of a service removed while it was stopped, so its start fails: SERVICE PORT DIRECTORY. Its owner, group
# and mode are kept in /var/lib/lab-faults to be put back.
# Run as root inside a lab host by fleet.py (fault HOST NAME SERVICE PORT DIRECTORY [--undo]), after _lib.sh
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

action=${1:-}
shift || true
of_service "$@"
[ "$#" -eq 3 ] || usage
directory=$3
kept="$kept_dir/directory$(echo "$directory" | tr / _)"

case "$action" in
break)
    [ -d "$directory" ] || { echo "$directory is no directory: nothing to break" >&2; exit 1; }
    mkdir -p "$kept_dir"
    stat -c '%U %G %a' "$directory" > "$kept"
    service "$service_name" stop
    rm -rf "$directory"
    start_must_fail "the removal of $directory"
    echo "removed $directory ($(cat "$kept")); $service_name is stopped and will not start"
    ;;
undo)
    if [ -e "$kept" ]; then
        read -r owner group mode < "$kept"
        [ -d "$directory" ] || install -d -o "$owner" -g "$group" -m "$mode" "$directory"
        rm "$kept"
    fi
    restart_answering
    ;;
*)
    usage
    ;;
esac
