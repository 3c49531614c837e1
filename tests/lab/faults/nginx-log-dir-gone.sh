#!/bin/sh
# nginx stopped and its log directory /var/log/nginx removed (a cleanup script, a tmpfs over /var/log): nginx -t and
# every start fail with `open() "/var/log/nginx/error.log" failed (2: No such file or directory)`, which reads like a
# configuration error though the configuration is fine.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

case "${1:-}" in
break)
    remove_directory_of nginx /var/log/nginx
    echo "removed /var/log/nginx; nginx is stopped and will not start"
    ;;
undo)
    [ -d /var/log/nginx ] || install -d -m 0755 -o root -g adm /var/log/nginx
    reset_failed nginx
    start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
