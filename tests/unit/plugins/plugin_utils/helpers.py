"""Builders for the unit tests: real objects, filled with what service_check would report, and an executor that
answers with scripted outputs (the real one runs in tests/integration); the heal loop's Toolkit built around it
(_tools) with the answers verification gives."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import Planner
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import HostUnreachable
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.steps import RunReport, RunStep, Target
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure, StepResult
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import Toolkit
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory

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
            # service_check looks at each declared log: a file, not a link
            "path_owners": {"/var/log/nginx/error.log": "www-data"},
            "port_owners": owners,
            "pidfile": pidfile,
            "processes": [],
        },
        spec=NGINX_SPEC,
    )


def on_systemd(failure: Failure, unit_id: str, **unit: str) -> Failure:
    evidence = dict(failure.evidence, unit={"Id": unit_id, **unit})
    return dataclasses.replace(failure, evidence=evidence, facts={"service_manager": "systemd"})


class ScriptedExecutor:
    step_timeout = 120

    def __init__(self, outputs: Mapping[str, str] | None = None, unreachable: bool = False) -> None:
        self.runs: list[tuple[str, list[tuple[str, ...]]]] = []
        # each run's steps whole: what the runner would tell the host besides the argv
        self.steps: list[tuple[RunStep, ...]] = []
        self.timeouts: list[float | None] = []
        self.alone: list[bool] = []
        self.outputs = outputs or {}
        self.unreachable = unreachable

    def run(self, target: Target, steps: Sequence[RunStep], *, purpose: str, stop: Callable[[], bool] | None = None,
            started: Callable[[str], None] | None = None, timeout: float | None = None, alone: bool = False) -> RunReport:
        self.runs.append((purpose, [step.argv for step in steps]))
        self.steps.append(tuple(steps))
        self.timeouts.append(timeout)
        self.alone.append(alone)
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


HEALTHY = {"healthy": True, "checks": []}
STILL_DOWN = {"healthy": False, "summary": "nginx is not running", "checks": []}
CONFIG_OK = {"nginx -t": "nginx: configuration file /etc/nginx/nginx.conf test is successful"}


def _tools(tmp_path: Path, executor: ScriptedExecutor, verdicts: list[Mapping[str, Any]], **overrides: Any) -> Toolkit:
    memory = overrides.pop("memory", None) or Memory(tmp_path)
    answers = iter(verdicts)
    defaults: dict[str, Any] = dict(
        planner=Planner(RunbookLibrary.load(), memory),
        policy=load_policy(),
        executor=executor,
        target=Target(name="web1", host_vars={}),
        verify=lambda spec: next(answers),
        memory=memory,
        verify_retries=1,
        verify_wait=0,
        sleep=lambda seconds: None,
    )
    defaults.update(overrides)
    return Toolkit(**defaults)
