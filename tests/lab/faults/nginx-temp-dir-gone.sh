#!/bin/sh
# nginx stopped and its state directory /var/lib/nginx (client body and proxy temporary files) removed: nginx -t and
# every start fail with `mkdir() "/var/lib/nginx/body" failed (2: No such file or directory)`.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

case "${1:-}" in
break)
    remove_directory_of nginx /var/lib/nginx
    echo "removed /var/lib/nginx; nginx is stopped and will not start"
    ;;
undo)
    [ -d /var/lib/nginx ] || install -d -m 0755 -o root -g root /var/lib/nginx
    reset_failed nginx
    start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
