"""Builders for the unit tests: real objects, filled with what service_check would report."""

from __future__ import annotations

from typing import Any

from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure

NGINX_SPEC: dict[str, Any] = {
    "name": "nginx", "service": None, "ports": [80], "process": "nginx", "pidfile": "/run/nginx.pid",
    "logs": ["/var/log/nginx/error.log"], "status_check": True,
}


def nginx_failure(failure_class: str = "stale_pidfile", *, pid: int = 812, owner: dict[str, Any] | None = None, host: str = "web1") -> Failure:
    pidfile = {"path": "/run/nginx.pid", "exists": failure_class == "stale_pidfile", "pid": pid, "alive": False, "process": None}
    summary = "/etc/init.d/nginx status: rc=3: nginx is not running; tcp 127.0.0.1:80: Connection refused"
    if failure_class == "stale_pidfile":
        summary += f"; pid file /run/nginx.pid names pid {pid}, which is not running"
    owners = [owner] if owner else []
    for o in owners:
        summary += f"; port 80/tcp is held by {o['process']} (pid {o['pid']})"
    return Failure(
        host=host,
        service="nginx",
        failure_class=failure_class,
        summary=summary,
        evidence={
            "status": {"command": "/etc/init.d/nginx status", "rc": 3, "output": " * nginx is not running"},
            "logs": {"/var/log/nginx/error.log": ""},
            "port_owners": owners,
            "pidfile": pidfile,
            "processes": [],
        },
        spec=NGINX_SPEC,
    )
