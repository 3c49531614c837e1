#!/bin/sh
# nginx stopped and its log directory /var/log/nginx removed (a cleanup script, a tmpfs over /var/log): nginx -t and
# every start fail with `open() "/var/log/nginx/error.log" failed (2: No such file or directory)`, which reads like a
# configuration error though the configuration is fine.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

case "${1:-}" in
break)
    service nginx stop
    rm -rf /var/log/nginx
    if service nginx start >/dev/null 2>&1; then
        echo "nginx started without /var/log/nginx" >&2
        exit 1
    fi
    echo "removed /var/log/nginx; nginx is stopped and will not start"
    ;;
undo)
    [ -d /var/log/nginx ] || install -d -m 0755 -o root -g adm /var/log/nginx
    if command -v systemctl >/dev/null && [ -d /run/systemd/system ]; then systemctl reset-failed nginx; fi
    start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
