#!/bin/sh
# A drop-in's ExecStartPre= checks that redis can write /var/lib/redis/backup, root's: redis will not start (systemd hosts).
# An admin's check (lab-backup-check.conf: ExecStartPre=/usr/bin/test -w /var/lib/redis/backup, run as User=redis) and
# the directory root:root 0755 (made by root, never chowned). The check fails (status 1), Restart=always retries until
# the start limit stops it, and redis says nothing: only the unit (`systemctl cat`) names the directory. Debian's unit
# lets redis execute only its own program (NoExecPaths=/, ExecPaths=/usr/bin/redis-server /usr/lib /lib), so the
# drop-in adds ExecPaths=/usr/bin/test: without it the check never runs (203/EXEC, whoever owns the directory).
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

require_systemd redis-prestart-dir-owner

dropin=/etc/systemd/system/redis-server.service.d/lab-backup-check.conf
backup=/var/lib/redis/backup

case "${1:-}" in
break)
    rm -rf "$backup"
    install -d -o root -g root -m 0755 "$backup"
    mkdir -p "${dropin%/*}"
    cat > "$dropin" <<UNIT
[Service]
ExecPaths=/usr/bin/test
ExecStartPre=/usr/bin/test -w $backup
UNIT
    systemctl daemon-reload
    restart_into_its_limit redis-server
    if redis_answers; then
        echo "redis answers with $backup owned by root" >&2
        exit 1
    fi
    # status 1: the check ran and found the directory not writable (203/EXEC would be the sandbox refusing to run it)
    checked=$(systemctl show redis-server --property=ExecStartPre --value)
    case "$checked" in
    *"code=exited ; status=1 }"*) ;;
    *)
        echo "the check of $dropin did not fail as it should: $checked" >&2
        exit 1
        ;;
    esac
    echo "added $dropin (ExecStartPre=/usr/bin/test -w $backup, as redis) and made $backup root:root 0755; redis-server failed $(systemctl show redis-server --property=NRestarts --value) restarts and hit its start limit"
    ;;
undo)
    if [ -e "$dropin" ]; then
        remove_dropin "$dropin"
    fi
    rm -rf "$backup"
    reset_failed redis-server
    start_until_answers redis-server redis_answers
    ;;
*)
    usage
    ;;
esac
