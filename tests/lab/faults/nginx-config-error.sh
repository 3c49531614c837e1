#!/bin/sh
# nginx config broken by a typo'd directive (server_nmae), nginx stopped and its start failing.
# The good config is kept in /var/backups/lab-nginx-default.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

site=/etc/nginx/sites-available/default
backup=/var/backups/lab-nginx-default

case "${1:-}" in
break)
    if [ ! -e "$backup" ]; then
        cp -p "$site" "$backup"
    fi
    sed -i 's/^\([[:space:]]*\)server_name _;/\1server_nmae _;/' "$site"
    if nginx -t 2>/dev/null; then
        echo "could not break $site: nginx -t still passes" >&2
        exit 1
    fi
    service nginx stop
    if service nginx start; then
        echo "nginx started with a broken config" >&2
        exit 1
    fi
    echo "broke $site (server_nmae); nginx is stopped and will not start"
    ;;
undo)
    if [ -e "$backup" ]; then
        cp -p "$backup" "$site"
        rm "$backup"
    fi
    start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
