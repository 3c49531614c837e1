#!/bin/sh
# A line the service refuses appended to one of its configuration files, and the service restarted, which fails:
# SERVICE PORT FILE LINE. The good version is kept in /var/lib/lab-faults. A FILE that is a link (apache2's
# sites-enabled/000-default.conf) is edited as sed -i edits it: the link is replaced by an edited copy of its file.
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
    cp -pP "$file" "$kept"
    if [ -L "$file" ]; then
        # shellcheck disable=SC2016  # sed's $ (the last line), not the shell's
        printf '%s\n' "$line" | sed -i '$r /dev/stdin' "$file"
    else
        printf '%s\n' "$line" >> "$file"
    fi
    service "$service_name" stop
    start_must_fail "'$line' in $file"
    echo "appended '$line' to $file; $service_name is stopped and will not start"
    ;;
undo)
    if [ -e "$kept" ]; then
        service "$service_name" stop || true
        cp -pP --remove-destination "$kept" "$file"
        rm "$kept"
    fi
    restart_answering
    ;;
*)
    usage
    ;;
esac
