#!/bin/sh
# A drop-in's ExecStartPre= checks that postgres can write its WAL archive directory, root's: postgres will not start (systemd hosts).
# An admin's check (lab-archive-check.conf: ExecStartPre=/usr/sbin/runuser -u postgres -- /usr/bin/test
# -w /var/lib/postgresql/wal-archive) and the directory root:root 0755 (made by root, never chowned). The cluster's unit
# fails in its ExecStartPre (status 1; the unit has no Restart=) and postgres says nothing: only the unit
# (`systemctl cat postgresql@15-main`) names the directory. The archive lies directly in /var/lib/postgresql (postgres's
# home): in /var/lib/postgresql/15, which postgres owns too, the guard would rightly leave its chown to a person.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

require_systemd postgres-prestart-dir-owner

unit=$postgres_unit
dropin=/etc/systemd/system/$unit.service.d/lab-archive-check.conf
archive=/var/lib/postgresql/wal-archive

case "${1:-}" in
break)
    rm -rf "$archive"
    install -d -o root -g root -m 0755 "$archive"
    mkdir -p "${dropin%/*}"
    cat > "$dropin" <<UNIT
[Service]
ExecStartPre=/usr/sbin/runuser -u postgres -- /usr/bin/test -w $archive
UNIT
    systemctl daemon-reload
    if systemctl restart "$unit" 2>/dev/null || postgres_answers; then
        echo "$unit started with $archive owned by root" >&2
        exit 1
    fi
    # status 1: the check ran and found the directory not writable (not runuser or systemd failing for another reason)
    checked=$(systemctl show "$unit" --property=ExecStartPre --value)
    case "$checked" in
    *"code=exited ; status=1 }"*) ;;
    *)
        echo "the check of $dropin did not fail as it should: $checked" >&2
        exit 1
        ;;
    esac
    echo "added $dropin (ExecStartPre=runuser -u postgres -- test -w $archive) and made $archive root:root 0755; $unit failed and is stopped"
    ;;
undo)
    if [ -e "$dropin" ]; then
        remove_dropin "$dropin"
    fi
    rm -rf "$archive"
    reset_failed "$unit"
    start_until_answers "$unit" postgres_answers
    ;;
*)
    usage
    ;;
esac
