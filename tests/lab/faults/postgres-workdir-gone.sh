#!/bin/sh
# A drop-in gives the cluster a working directory, /var/log/postgresql, which is gone: postgres will not start (systemd hosts).
# lab-workdir.conf: WorkingDirectory=/var/log/postgresql (an admin's, so that core files land beside the logs), and
# the directory removed by a cleanup. systemd fails the unit before pg_ctlcluster runs (status 200/CHDIR; no
# Restart=). The journal says that the change of directory failed and names the program, not the directory; no
# configuration test or declared path of postgres names it: only the unit (`systemctl cat postgresql@15-main`)
# does. Debian's postgresql-common makes /var/log/postgresql root:postgres 1775.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
# shellcheck disable=SC2154  # its variables come from _lib.sh, which fleet.py runs first
set -eu

require_systemd postgres-workdir-gone

unit=$postgres_unit
dropin=/etc/systemd/system/$unit.service.d/lab-workdir.conf
workdir=/var/log/postgresql

case "${1:-}" in
break)
    mkdir -p "${dropin%/*}"
    cat > "$dropin" <<UNIT
[Service]
WorkingDirectory=$workdir
UNIT
    systemctl daemon-reload
    systemctl stop "$unit"
    rm -rf "$workdir"
    if systemctl start "$unit" 2>/dev/null || postgres_answers; then
        echo "$unit started without $workdir" >&2
        exit 1
    fi
    if ! journalctl -u "$unit" -n 20 --no-pager | grep -q "at step CHDIR"; then
        echo "$unit did not fail at step CHDIR" >&2
        exit 1
    fi
    echo "added $dropin (WorkingDirectory=$workdir) and removed $workdir; $unit failed at step CHDIR and is stopped"
    ;;
undo)
    if [ -e "$dropin" ]; then
        remove_dropin "$dropin"
    fi
    # as Debian's postgresql-common has it (a heal may have made it already)
    [ -d "$workdir" ] || install -d -m 1775 -o root -g postgres "$workdir"
    reset_failed "$unit"
    start_until_answers "$unit" postgres_answers
    ;;
*)
    usage
    ;;
esac
