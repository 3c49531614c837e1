#!/bin/sh
# A drop-in makes nginx start with a configuration file that does not exist (systemd hosts): a
# deploy that shipped the unit change but not the file. `nginx -t` (the default file) still
# passes; the unit fails in its ExecStartPre=, and only the journal names the missing file.
set -eu

dropin=/etc/systemd/system/nginx.service.d/lab-site-prod.conf

case "${1:-}" in
break)
    mkdir -p "${dropin%/*}"
    cat > "$dropin" <<'UNIT'
[Service]
ExecStartPre=
ExecStartPre=/usr/sbin/nginx -t -q -c /etc/nginx/site-prod.conf -g 'daemon on; master_process on;'
ExecStart=
ExecStart=/usr/sbin/nginx -c /etc/nginx/site-prod.conf -g 'daemon on; master_process on;'
UNIT
    reload_and_fail_to_restart nginx "without /etc/nginx/site-prod.conf"
    echo "added $dropin (-c /etc/nginx/site-prod.conf, which does not exist); nginx is stopped and will not start"
    ;;
undo)
    if [ -e "$dropin" ]; then
        remove_dropin "$dropin"
        systemctl reset-failed nginx
    fi
    start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
