#!/bin/sh
# A line the service refuses appended to one of its configuration files, and the service restarted, which fails:
# SERVICE PORT FILE LINE. The good version is kept in /var/lib/lab-faults.
# Run as root inside a lab host by fleet.py (fault HOST NAME SERVICE PORT FILE LINE [--undo]), after _lib.sh
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

action=${1:-}
shift || true
of_service "$@"
[ "$#" -eq 4 ] || usage
file=$3 line=$4
kept="$kept_dir/file$(echo "$file" | tr / _)"

case "$action" in
break)
    if [ -e "$kept" ]; then
        echo "$file is already broken" >&2
        exit 1
    fi
    mkdir -p "$kept_dir"
    cp -p "$file" "$kept"
    printf '%s\n' "$line" >> "$file"
    service "$service_name" stop
    start_must_fail "'$line' in $file"
    echo "appended '$line' to $file; $service_name is stopped and will not start"
    ;;
undo)
    if [ -e "$kept" ]; then
        service "$service_name" stop || true
        cp -p "$kept" "$file"
        rm "$kept"
    fi
    restart_answering
    ;;
*)
    usage
    ;;
esac
