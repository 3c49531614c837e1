"""Builders for the unit tests: real objects, filled with what service_check would report, and an executor that
answers with scripted outputs (the real one runs in tests/integration)."""

from __future__ import annotations

from typing import Any, Callable, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import HostUnreachable
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure, StepResult
from ansible_collections.sentinel.heal.plugins.plugin_utils.runner import RunReport, RunStep, Target

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


class ScriptedExecutor:
    step_timeout = 120

    def __init__(self, outputs: Mapping[str, str] | None = None, unreachable: bool = False) -> None:
        self.runs: list[tuple[str, list[tuple[str, ...]]]] = []
        self.timeouts: list[float | None] = []
        self.outputs = outputs or {}
        self.unreachable = unreachable

    def run(self, target: Target, steps: Sequence[RunStep], *, purpose: str, stop: Callable[[], bool] | None = None,
            started: Callable[[str], None] | None = None, timeout: float | None = None) -> RunReport:
        self.runs.append((purpose, [step.argv for step in steps]))
        self.timeouts.append(timeout)
        if started is not None:
            started(f"/nonexistent/{purpose}-{len(self.runs)}")
        if self.unreachable and purpose == "remediation":
            raise HostUnreachable("the host did not answer", field="host", value=target.name)
        results: list[StepResult] = []
        for step in steps:  # as ansible-runner polls its cancel callback: between steps
            if stop is not None and stop():
                results.append(StepResult(argv=step.argv, status="skipped", stderr="not run: the run was stopped"))
                continue
            results.append(StepResult(argv=step.argv, status="ok", rc=0, stdout=self.outputs.get(" ".join(step.argv), "")))
        stopped = any(result.status == "skipped" for result in results)
        return RunReport(results=tuple(results), artifacts="/dev/null", duration_s=0.0, stopped=stopped)

    @property
    def remediations(self) -> list[list[tuple[str, ...]]]:
        return [argvs for purpose, argvs in self.runs if purpose == "remediation"]
