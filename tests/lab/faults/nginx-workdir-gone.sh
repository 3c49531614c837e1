#!/bin/sh
# A drop-in gives nginx a working directory, /var/lib/nginx, which is gone: nginx will not start (systemd hosts).
# lab-workdir.conf: WorkingDirectory=/var/lib/nginx (nginx's state directory, which holds its temporary directories body,
# proxy, ...), and the directory removed. systemd fails the unit before nginx runs (its ExecStartPre=, status 200/CHDIR);
# nginx's unit has no Restart=, so it stays failed. The journal says that the change of directory failed, not which
# directory: only the unit (`systemctl cat nginx`) names it. Debian's nginx package makes /var/lib/nginx root:root 0755;
# nginx makes body, proxy and the rest itself when it starts.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

require_systemd nginx-workdir-gone

dropin=/etc/systemd/system/nginx.service.d/lab-workdir.conf
workdir=/var/lib/nginx

case "${1:-}" in
break)
    mkdir -p "${dropin%/*}"
    cat > "$dropin" <<UNIT
[Service]
WorkingDirectory=$workdir
UNIT
    systemctl daemon-reload
    systemctl stop nginx
    rm -rf "$workdir"
    if systemctl restart nginx 2>/dev/null || nginx_answers; then
        echo "nginx started without $workdir" >&2
        exit 1
    fi
    # status 200/CHDIR in the first command it runs (ExecStartPre=): systemd could not enter the directory
    checked=$(systemctl show nginx --property=ExecStartPre --value)
    case "$checked" in
    *"code=exited ; status=200 }"*) ;;
    *)
        echo "nginx did not fail at step CHDIR: $checked" >&2
        exit 1
        ;;
    esac
    echo "added $dropin (WorkingDirectory=$workdir) and removed $workdir; nginx failed at step CHDIR and is stopped"
    ;;
undo)
    if [ -e "$dropin" ]; then
        remove_dropin "$dropin"
    fi
    # as Debian's nginx package has it (a heal may have made it already)
    [ -d "$workdir" ] || install -d -m 0755 -o root -g root "$workdir"
    reset_failed nginx
    start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
