#!/bin/sh
# nginx taken off the host as a package removal would (its program, unit and init script gone; its configuration
# stays), while the inventory still declares it: `service nginx start` says "unrecognized service" every time.
# The files are kept aside under /var/lib/lab-removed so that undo puts them back.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

aside=/var/lib/lab-removed
files="/usr/sbin/nginx /lib/systemd/system/nginx.service /etc/init.d/nginx"

case "${1:-}" in
break)
    service nginx stop
    mkdir -p "$aside"
    for file in $files; do
        if [ -e "$file" ]; then
            mkdir -p "$aside${file%/*}"
            mv "$file" "$aside$file"
        fi
    done
    if [ -d /run/systemd/system ]; then systemctl daemon-reload; fi
    echo "nginx removed (kept aside in $aside); its configuration stays"
    ;;
undo)
    for file in $files; do
        if [ -e "$aside$file" ]; then mv "$aside$file" "$file"; fi
    done
    rm -rf "$aside"
    if [ -d /run/systemd/system ]; then systemctl daemon-reload; systemctl reset-failed nginx || true; fi
    start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
