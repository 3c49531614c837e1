#!/bin/sh
# nginx is PartOf= an umbrella unit, web-stack.service (ExecStart=/bin/true, as Debian's postgresql fronts its clusters),
# and a person stopped the umbrella, which stopped nginx with it (systemd hosts). A heal starts the unit the umbrella
# fronts; the umbrella itself stays inactive, and is up when what it fronts is.
# Declared as its own service (web-stack, process nginx, port 80) by the test that uses it.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

require_systemd nginx-behind-umbrella

umbrella=/etc/systemd/system/web-stack.service
dropin=/etc/systemd/system/nginx.service.d/lab-web-stack.conf

case "${1:-}" in
break)
    cat > "$umbrella" <<UNIT
[Unit]
Description=the web stack (fronts nginx)
Wants=nginx.service

[Service]
Type=oneshot
RemainAfterExit=yes
ExecStart=/bin/true

[Install]
WantedBy=multi-user.target
UNIT
    mkdir -p "${dropin%/*}"
    printf '[Unit]\nPartOf=web-stack.service\n' > "$dropin"
    systemctl daemon-reload
    systemctl start web-stack.service
    wait_until nginx_answers
    systemctl stop web-stack.service
    if systemctl is-active --quiet nginx; then
        echo "nginx still runs after its umbrella stopped" >&2
        exit 1
    fi
    echo "web-stack.service stopped, and nginx (PartOf=web-stack.service) with it"
    ;;
undo)
    systemctl stop web-stack.service 2>/dev/null || true
    rm -f "$umbrella" "$dropin"
    rmdir "${dropin%/*}" 2>/dev/null || true
    systemctl daemon-reload
    systemctl reset-failed nginx 2>/dev/null || true
    start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
