#!/bin/sh
# /var/log/nginx out of inodes and nginx restarted after logrotate renamed its logs away: it cannot create
# error.log and will not start. No runbook of nginx's own covers it: the class log-filesystem-full removes the rotated
# generations of its declared log (error.log), once a person approved it.
# The log partition is a 4 MB tmpfs with 29 inodes (named lab-nginx-logs), mounted inside the host's own mount
# namespace and filled with what Debian's logrotate for nginx (daily, rotate 14, compress, delaycompress) keeps; the
# real /var/log/nginx underneath is untouched and comes back with undo.
# Run as root inside a lab host by fleet.py (fault HOST NAME [--undo]), after _lib.sh: break|undo
set -eu

logdir=/var/log/nginx
line='127.0.0.1 - - [01/Jan/2026:00:00:00 +0000] "GET / HTTP/1.1" 200 615 "-" "curl/7.88.1"'

mounted() {
    grep -q "^lab-nginx-logs $logdir " /proc/mounts
}

case "${1:-}" in
break)
    if mounted; then
        echo "$logdir is already the full lab partition" >&2
        exit 1
    fi
    if ! nginx_answers; then
        echo "nginx is not running" >&2
        exit 1
    fi
    service nginx stop
    # 29 inodes: the directory and 28 rotated logs (access.log and error.log: yesterday's uncompressed, 13 older days
    # compressed); no inode left for a new access.log or error.log
    mount -t tmpfs -o "size=4m,nr_inodes=29,mode=0755,uid=0,gid=$(getent group adm | cut -d: -f3)" lab-nginx-logs "$logdir"
    for log in access.log error.log; do
        yes "$line" | head -n 2000 > "$logdir/$log.1"
        for n in 2 3 4 5 6 7 8 9 10 11 12 13 14; do
            yes "$line" | head -n 2000 | gzip > "$logdir/$log.$n.gz"
        done
    done
    chown www-data:adm "$logdir"/*.log.*
    chmod 0640 "$logdir"/*.log.*
    if service nginx start >/dev/null 2>&1 && nginx_answers; then
        echo "nginx started with no inode left in $logdir" >&2
        exit 1
    fi
    echo "$logdir has no inode left ($(df -Pi "$logdir" | awk 'NR == 2 {print $5}') used); nginx will not start"
    ;;
undo)
    if mounted; then
        service nginx stop
        umount "$logdir"
    fi
    reset_failed nginx
    start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
