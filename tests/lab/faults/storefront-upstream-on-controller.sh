#!/bin/sh
# A storefront nginx serves on 127.0.0.1:8082 by proxying to one upstream on the controller's side of the lab's bridge
# (10.77.0.1:8090), shared by every host that has this site: when that upstream is down, each answers 502 for the same
# cause, which is on none of them. The upstream is the test's own (test_fleet_scale_lab.py); this is only the site.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

require_systemd storefront-upstream-on-controller

site=/etc/nginx/conf.d/lab-shared-storefront.conf

case "${1:-}" in
break)
    cat > "$site" <<'SITE'
server {
    listen 127.0.0.1:8082;
    location / { proxy_pass http://10.77.0.1:8090/; proxy_connect_timeout 2s; }
}
SITE
    nginx -t 2>/dev/null
    systemctl reload nginx
    echo "the storefront on 127.0.0.1:8082 proxies to http://10.77.0.1:8090/"
    ;;
undo)
    rm -f "$site"
    systemctl reload nginx || start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
