#!/bin/sh
# nginx past its start limit (systemd hosts): a deploy script restarted it six times in a row.
# Each restart succeeds until the sixth, which systemd refuses (StartLimitBurst=5 within
# StartLimitIntervalSec=10s): the unit is failed with result start-limit-hit, though nothing is
# wrong with nginx any more. `systemctl reset-failed nginx` and one start bring it back.
set -eu

result() {
    systemctl show nginx --property=Result --value
}

case "${1:-}" in
break)
    for _ in 1 2 3 4 5 6; do
        systemctl restart nginx 2>/dev/null || true
    done
    if [ "$(result)" != start-limit-hit ]; then
        echo "nginx did not hit its start limit (result: $(result))" >&2
        exit 1
    fi
    echo "restarted nginx six times: the unit hit its start limit and nginx is stopped"
    ;;
undo)
    if [ "$(result)" = start-limit-hit ]; then
        systemctl reset-failed nginx
    fi
    start_until_answers nginx nginx_answers
    ;;
*)
    usage
    ;;
esac
