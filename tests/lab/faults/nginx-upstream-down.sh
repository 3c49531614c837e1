#!/bin/sh
# A storefront nginx proxies to an upstream on the same host, and the upstream is down (systemd hosts): nginx runs and
# answers 502 on :8081. The upstream, lab-upstream.service (python3's http.server on 127.0.0.1:8080), is made here;
# systemd does not know that nginx needs it - only a declared depends_on says so.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

require_systemd nginx-upstream-down

unit=/etc/systemd/system/lab-upstream.service
site=/etc/nginx/conf.d/lab-storefront.conf
root=/srv/lab-upstream

storefront_answers() {
    [ "$(curl -fs --max-time 2 http://127.0.0.1:8081/)" = "lab upstream" ]
}

case "${1:-}" in
break)
    mkdir -p "$root"
    echo "lab upstream" > "$root/index.html"
    cat > "$unit" <<UNIT
[Unit]
Description=The lab's upstream of the storefront

[Service]
ExecStart=/usr/bin/python3 -m http.server 8080 --bind 127.0.0.1 --directory $root
UNIT
    cat > "$site" <<'SITE'
server {
    listen 127.0.0.1:8081;
    location / { proxy_pass http://127.0.0.1:8080/; }
}
SITE
    systemctl daemon-reload
    systemctl start lab-upstream
    systemctl reload nginx
    wait_until storefront_answers
    systemctl stop lab-upstream
    if storefront_answers; then
        echo "the storefront answers without its upstream" >&2
        exit 1
    fi
    echo "lab-upstream stopped: the storefront on 127.0.0.1:8081 answers 502"
    ;;
undo)
    systemctl stop lab-upstream 2>/dev/null || true
    rm -f "$unit" "$site"
    rm -rf "$root"
    systemctl daemon-reload
    systemctl reset-failed lab-upstream 2>/dev/null || true
    systemctl reload nginx || start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
