"""What a run is made of: the host it goes to (Target), its steps (RunStep, with what the executor on the host is told
of each: HostRequest), the task file a host's steps become in the run's playbook, and what comes back (RunReport, the
executor's answer inside a step's result). Every command word reaches the task file ``!unsafe``, word for word:
nothing a plan says is ever templated or retyped."""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.module_utils._host.host_configuration import EXECUTOR_PATH
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ExecutorError
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import REFUSED_BY_THE_HOST, RESTORE_PROGRAM, StepResult

# A step still running at its timeout gets SIGTERM on the host, and SIGKILL this many seconds later.
TIMEOUT_KILL_AFTER_S = 5


@dataclass(frozen=True)
class Target:
    """An inventory host and the connection variables that reach it."""

    name: str
    host_vars: Mapping[str, Any]
    secret_vars: Mapping[str, Any] = field(default_factory=dict)
    config_file: str | None = None


@dataclass(frozen=True)
class HostRequest:
    """What the executor on the host is told of a step besides its argv: the incident's service, the policy version
    the controller judged under, the plan the step belongs to and its place there, and whether it only reads."""

    service: str
    policy_version: str
    plan: tuple[tuple[str, ...], ...]
    index: int
    kind: str = "step"
    # a person's signed approval, for a step the policy sends to a person (guard/host_approval.py)
    approval: Mapping[str, Any] | None = None
    # the run of the plan the step belongs to (one per attempt): the host runs a plan's steps in order, once each
    run: str = ""
    # the failure the plan was made for: the host's own check must find it before the plan's first step runs
    failure_class: str = ""
    fingerprint: str = ""


@dataclass(frozen=True)
class RunStep:
    argv: tuple[str, ...]
    become: bool
    may_fail: bool = False
    # with the executor on the host (privilege "executor"), what it is sent
    on_host: HostRequest | None = None
    # a restore of a last known good file without the executor (privilege "become"): the service's configuration test
    restore_test: tuple[str, ...] = ()


@dataclass(frozen=True)
class RunReport:
    results: tuple[StepResult, ...]
    artifacts: str
    duration_s: float
    # the caller's stop() said so during the run: the steps not yet started did not start
    stopped: bool = False


PLAYBOOK = """- name: sentinel.heal steps
  hosts: all
  gather_facts: false
  strategy: free
  tasks:
    - name: the steps of this host
      ansible.builtin.include_tasks: "hosts/{{ sentinel_heal_member }}.yml"
"""


def host_tasks(host: str, steps: Sequence[RunStep], step_timeout: int, privilege: str) -> str:
    """A host's task file, whose every command word is `!unsafe`, word for word: nothing a plan says is ever templated
    or retyped."""
    lines = []
    for number, step in enumerate(steps, start=1):
        if privilege == "become" and step.argv[0] == RESTORE_PROGRAM:
            action, become = _restore_action(step), True
        else:
            action, become = _command_action(host, step, step_timeout, privilege)
        lines += [
            f"- name: step {number}",
            *action,
            f"  become: {str(become).lower()}",
            f"  ignore_errors: {str(step.may_fail).lower()}",
            f"  timeout: {int(step_timeout) + TIMEOUT_KILL_AFTER_S + 10}",  # a backstop, should the host's timeout not answer
        ]
    return "\n".join(lines) + "\n"


def _command_action(host: str, step: RunStep, step_timeout: int, privilege: str) -> tuple[list[str], bool]:
    """The step as ``ansible.builtin.command``, and whether the task becomes root."""
    request, limit = None, int(step_timeout)
    words: tuple[str, ...]
    if privilege == "executor":
        # the executor runs the step as root only where the host's policy says so, and stops it at the timeout itself
        request, limit = _host_request(host, step, step_timeout), limit + TIMEOUT_KILL_AFTER_S
        words, become = ("sudo", "-n", EXECUTOR_PATH), False
    else:
        through_sudo = step.become and privilege == "sudo"
        words, become = ("sudo", "-n", "--", *step.argv) if through_sudo else step.argv, step.become and not through_sudo
    # Ansible's task timeout stops waiting but leaves the command running on the host: coreutils' timeout kills it
    # (and what it started) there; outside sudo, so a host's sudo rule still sees the plain command
    words = ("timeout", "--kill-after", str(TIMEOUT_KILL_AFTER_S), str(limit), *words)
    # one tag on the whole sequence: a tag per word makes YAML 1.1 read "no" as false and "0755" as 493
    argv = ", ".join(json.dumps(arg) for arg in words)
    return [
        "  ansible.builtin.command:",
        f"    argv: !unsafe [{argv}]",
        "    expand_argument_vars: false",  # the guard judged "~" and "$HOME" as written: the host runs them so
        *([f"    stdin: !unsafe {json.dumps(request)}"] if request is not None else []),
    ], become


def _restore_action(step: RunStep) -> list[str]:
    """``sentinel-heal-restore PATH SHA256`` on a host without the executor: the module that does what the executor
    would (as root), with the service's configuration test."""
    if step.on_host is None or len(step.argv) != 3:
        raise ExecutorError("a restore of a last known good file names its service, the file and the copy's hash", field="steps",
                            value=list(step.argv), hint="the loop runs the restore-known-good runbook's step as the guard judged it")
    return [
        "  sentinel.heal.known_good_restore:",
        f"    service: !unsafe {json.dumps(step.on_host.service)}",
        f"    path: !unsafe {json.dumps(step.argv[1])}",
        f"    sha256: !unsafe {json.dumps(step.argv[2])}",
        f"    config_test: !unsafe [{', '.join(json.dumps(arg) for arg in step.restore_test)}]",
    ]


def _host_request(host: str, step: RunStep, step_timeout: int) -> str:
    """The executor's request for a step (its plan, its place, the policy version), as JSON."""
    if step.on_host is None:
        raise ExecutorError("a step for the executor on the host carries no request", field="steps", value=list(step.argv),
                            hint="the loop attaches the incident's service, plan and policy version to every step it runs")
    on_host = step.on_host
    request = {"host": host, "service": on_host.service, "policy_version": on_host.policy_version,
               "plan": [list(argv) for argv in on_host.plan], "step": on_host.index, "kind": on_host.kind, "timeout": int(step_timeout)}
    if on_host.approval is not None:
        request["approval"] = dict(on_host.approval)
    if on_host.kind == "step":
        request.update(run=on_host.run, failure_class=on_host.failure_class, fingerprint=on_host.fingerprint)
    return json.dumps(request, sort_keys=True)


def executor_answer(res: Mapping[str, Any]) -> tuple[Mapping[str, Any], bool, str]:
    """The step's own result inside the executor's answer (its JSON on stdout), whether it failed, and why the host
    refused it ("" when it ran). An answer that is not the executor's (sudo refused to run it) is the step's failure."""
    try:
        answer = json.loads(str(res.get("stdout") or ""))
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        return res, True, f"the executor on the host did not answer: {res.get('stderr') or res.get('msg') or res.get('stdout')}"
    if answer.get("refused"):
        return res, True, REFUSED_BY_THE_HOST.format(rule=answer.get("rule"), reason=answer.get("reason"))
    inner = {"rc": answer.get("rc"), "stdout": answer.get("stdout", ""), "stderr": answer.get("stderr", ""), "delta": res.get("delta")}
    return inner, answer.get("rc") != 0, ""
