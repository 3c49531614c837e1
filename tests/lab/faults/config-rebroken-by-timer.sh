#!/bin/sh
# A timer that keeps pushing a broken line into a configuration file and restarts the service (systemd hosts): SERVICE
# PORT FILE LINE SECONDS, as a configuration-management run with a bad template does. lab-config-push.timer runs
# lab-config-push.service at once and every SECONDS after: when FILE lacks LINE, it appends LINE and restarts SERVICE,
# which fails. A restore of FILE holds until the next run. The good FILE is kept in /var/lib/lab-faults.
# Run as root inside a lab host by fleet.py (fault HOST NAME SERVICE PORT FILE LINE SECONDS [--undo]), after _lib.sh
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

action=${1:-}
shift || true
of_service "$@"
[ "$#" -eq 5 ] || usage
file=$3 line=$4 seconds=$5
kept="$kept_dir/file$(echo "$file" | tr / _)"
push=/usr/local/sbin/lab-config-push
units=/etc/systemd/system

case "$action" in
break)
    require_systemd config-rebroken-by-timer
    if [ -e "$kept" ]; then
        echo "$file is already broken" >&2
        exit 1
    fi
    mkdir -p "$kept_dir"
    cp -p "$file" "$kept"
    # the pushed line and names are this fault's arguments, written into the script as single-quoted words
    quoted_line=$(printf '%s' "$line" | sed "s/'/'\\\\''/g")
    printf '#!/bin/sh\n# the configuration push of the lab fault config-rebroken-by-timer\ngrep -qxF -- '"'%s'"' %s && exit 0\nprintf "%%s\\n" '"'%s'"' >> %s\nsystemctl restart %s || true\n' \
        "$quoted_line" "$file" "$quoted_line" "$file" "$service_name" > "$push"
    chmod 755 "$push"
    printf '[Unit]\nDescription=lab configuration push\n\n[Service]\nType=oneshot\nExecStart=%s\n' "$push" > "$units/lab-config-push.service"
    printf '[Unit]\nDescription=lab configuration push, every %s s\n\n[Timer]\nOnActiveSec=1s\nOnUnitActiveSec=%ss\nAccuracySec=1s\n' \
        "$seconds" "$seconds" > "$units/lab-config-push.timer"
    systemctl daemon-reload
    systemctl start lab-config-push.timer
    wait_until grep -qxF -- "$line" "$file"
    wait_until sh -c "! systemctl is-active --quiet $service_name"
    echo "lab-config-push.timer appends '$line' to $file and restarts $service_name now and every $seconds s; $service_name is down"
    ;;
undo)
    systemctl stop lab-config-push.timer lab-config-push.service 2>/dev/null || true
    rm -f "$units/lab-config-push.timer" "$units/lab-config-push.service" "$push"
    systemctl daemon-reload
    systemctl reset-failed lab-config-push.service 2>/dev/null || true
    if [ -e "$kept" ]; then
        cp -p "$kept" "$file"
        rm "$kept"
    fi
    restart_answering
    ;;
*)
    usage
    ;;
esac
