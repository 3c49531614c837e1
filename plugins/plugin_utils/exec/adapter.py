"""What the action plugins share to adapt Ansible to the engine.

:func:`target_for_task` turns the connection Ansible resolved for a task into a Target
ansible-runner can reach. Every option of the task's connection plugin (and of its become plugin) that has an
``ansible_*`` variable is passed on under that variable, so the run reaches the host exactly as
the play did: dynamic inventories, ``-u``/``--private-key`` on the command line and AWX machine
credentials included. Secret options travel separately and are never written to the artifacts.
"""

from __future__ import annotations

import contextlib
import os
import time
from collections.abc import Set
from dataclasses import dataclass
from typing import Any, Callable, Iterator, Mapping, Sequence

from ansible import constants as C
from ansible.errors import AnsibleActionFail, AnsibleConnectionFailure

from ansible_collections.sentinel.heal.plugins.module_utils._guard.judge import Policy
from ansible_collections.sentinel.heal.plugins.module_utils._host.host_configuration import EXECUTOR_PATH
from ansible_collections.sentinel.heal.plugins.module_utils._text import clip
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ExecutorError, HostUnreachable
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.rendezvous import Rendezvous
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.runner import RunnerExecutor
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.steps import RunReport, RunStep, Target
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.leases import BlastRadius, process_owner
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.secrets import redact
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import StepResult

SERVICE_CHECK = "sentinel.heal.service_check"
EVIDENCE = "sentinel.heal.evidence"

_SECRET_OPTION_WORDS = ("pass", "private_key_passphrase", "token")
_SECRET_OPTIONS = frozenset({"private_key"})
_BECOME_FALLBACK_VARS = ("ansible_become_method", "ansible_become_user", "ansible_become_exe", "ansible_become_flags")
_BECOME_PASSWORD_VARS = ("ansible_become_password", "ansible_become_pass")


def check_ranges(args: Mapping[str, Any], ranges: Mapping[str, tuple[int, int]]) -> None:
    """Fail the task on an option outside its range, naming it and its value; an unset option (None) is not checked."""
    for name, (low, high) in ranges.items():
        if args.get(name) is not None and not low <= args[name] <= high:
            raise AnsibleActionFail(f"{name}: {args[name]!r} is out of range ({low}-{high})")


def job_of(task_vars: Mapping[str, Any]) -> str:
    """The job a task belongs to: AWX's job id when there is one, else the ansible-playbook process every fork of the play
    was started by (its pid and start time: pids are reused)."""
    job = task_vars.get("awx_job_id") or task_vars.get("tower_job_id")
    return f"awx-job-{job}" if job else f"ansible-playbook-{process_owner(os.getppid())}"


def blast_radius(options: Mapping[str, Any], task_vars: Mapping[str, Any]) -> BlastRadius:
    """The caps of the task's options, for the run the task belongs to: the workflow job of AWX when the job is one of
    a workflow's (every slice of a sliced job, on whichever execution node, is one run: its caps count across them), else
    the job. The run's hosts are the play's, every batch of ``serial`` included (of a slice, the slice's)."""
    workflow = task_vars.get("awx_workflow_job_id") or task_vars.get("tower_workflow_job_id")
    run_id = f"awx-workflow-job-{workflow}" if workflow else job_of(task_vars)
    run_hosts = task_vars.get("ansible_play_hosts_all") or [task_vars.get("inventory_hostname")]
    return BlastRadius(max_running=options.get("max_running", 0), max_hosts_per_run=options.get("max_hosts_per_run", 0),
                       max_attempts_per_run=options.get("max_attempts_per_run", 0), run_id=run_id,
                       max_fail_percentage=options.get("max_fail_percentage"), run_hosts=len(run_hosts))


def step_executor(options: Mapping[str, Any], secrets: Sequence[str], task_vars: Mapping[str, Any], radius: BlastRadius) -> Rendezvous:
    """What runs a task's remediation steps: ansible-runner, in one run with the other forks of the job that remediate
    at the same time (of its job only: a slice never waits for, nor runs in, another slice's process)."""
    runner = RunnerExecutor(f"{options['state_dir']}/runs", step_timeout=options.get("step_timeout", 120), secrets=secrets,
                            privilege=options.get("step_privilege", "become"))
    return Rendezvous(runner, key=job_of(task_vars), hosts=radius.run_hosts)


def target_for_task(host: str, connection: Any, task_vars: Mapping[str, Any], templar: Any) -> Target:
    host_vars: dict[str, Any] = {"ansible_connection": connection._load_name}
    secret_vars: dict[str, Any] = {}
    _copy_plugin_options("connection", connection, host_vars, secret_vars)
    become = getattr(connection, "become", None)
    if become is not None:
        host_vars["ansible_become_method"] = become._load_name
        _copy_plugin_options("become", become, host_vars, secret_vars)
    else:
        # The heal task itself runs without become: take what the inventory says for the steps that need it.
        for name in _BECOME_FALLBACK_VARS:
            if task_vars.get(name) is not None:
                host_vars[name] = templar.template(task_vars[name])
        for name in _BECOME_PASSWORD_VARS:
            if task_vars.get(name) is not None:
                secret_vars[name] = templar.template(task_vars[name])
                break
    interpreter = task_vars.get("ansible_python_interpreter") or (task_vars.get("ansible_facts") or {}).get("discovered_interpreter_python")
    if interpreter:
        host_vars["ansible_python_interpreter"] = templar.template(interpreter)
    return Target(name=host, host_vars=host_vars, secret_vars=secret_vars, config_file=C.CONFIG_FILE)


class InventoryHosts(Set[str]):
    """The names and addresses (``ansible_host``) of the inventory's hosts: with loopback, the only hosts the guard lets
    a probe reach. A name is known at once; the addresses are read when a probe first asks for one that is no name:
    each is a host's variables, all of them evaluated, and each of a play's N workers would read all N."""

    def __init__(self, task_vars: Mapping[str, Any], templar: Any) -> None:
        self._names = frozenset(str(name) for name in (task_vars.get("groups") or {}).get("all") or ())
        self._hostvars = task_vars.get("hostvars") or {}
        self._templar = templar
        self._all: frozenset[str] | None = None

    def __contains__(self, item: object) -> bool:
        return item in self._names or item in self._everything()

    def __iter__(self) -> Iterator[str]:
        return iter(self._everything())

    def __len__(self) -> int:
        return len(self._everything())

    def _everything(self) -> frozenset[str]:
        if self._all is None:
            addresses = (str(self._templar.template(address)) for address in
                         ((self._hostvars.get(name) or {}).get("ansible_host") for name in self._names) if address)
            self._all = self._names | frozenset(addresses)
        return self._all


def _copy_plugin_options(plugin_type: str, plugin: Any, host_vars: dict[str, Any], secret_vars: dict[str, Any]) -> None:
    definitions = C.config.get_configuration_definitions(plugin_type, plugin._load_name) or {}
    for option, definition in definitions.items():
        variable = next((v["name"] for v in definition.get("vars") or [] if v["name"].startswith("ansible_")), None)
        if variable is None:
            continue
        try:
            value = plugin.get_option(option)
        except KeyError:
            continue
        if value is None or value == "":
            continue
        secret = option in _SECRET_OPTIONS or any(word in option for word in _SECRET_OPTION_WORDS)
        (secret_vars if secret else host_vars)[variable] = value


def executor_policy(options: Mapping[str, Any], policy: Policy) -> str:
    """The policy version for service_check's executor_policy: ``policy``'s when the steps go to the executor on the host,
    else "" (the module checks itself)."""
    return policy.version if options.get("step_privilege") == "executor" else ""


@contextlib.contextmanager
def privilege_for_host(action: Any, options: Mapping[str, Any], task_vars: Mapping[str, Any]) -> Iterator[dict[str, Any]]:
    """The task's options with ``step_privilege: auto`` made the host's own: the executor where the host has it
    installed (the role sentinel.heal.host's), the play's become elsewhere. With the executor, the task's own module
    calls run without become for as long as the task runs: the healing account's one sudo rule there is the executor,
    so a become would fail (or, where other rules stay, run the check as root beside it)."""
    if options.get("step_privilege") != "auto":
        yield dict(options)
        return
    if not executor_installed(action, task_vars):
        yield {**options, "step_privilege": "become"}
        return
    become = action._connection.become
    action._connection.set_become_plugin(None)
    try:
        yield {**options, "step_privilege": "executor"}
    finally:
        action._connection.set_become_plugin(become)


def executor_installed(action: Any, task_vars: Mapping[str, Any]) -> bool:
    """Whether the host has the executor: one command over the task's connection, as its account (no become)."""
    try:
        answered = action._low_level_execute_command(f"test -x {EXECUTOR_PATH}", sudoable=False)
    except AnsibleConnectionFailure as exc:
        raise HostUnreachable("the host did not answer", field="host", value=task_vars.get("inventory_hostname"), hint=str(exc)) from exc
    return bool(answered.get("rc") == 0)


def _declared(spec: Mapping[str, Any]) -> dict[str, Any]:
    """A service as declared, from the spec service_check returned (which lists every option, unset ones as None)."""
    return {name: value for name, value in spec.items() if value is not None}


def service_check(action: Any, services: Sequence[Mapping[str, Any]], task_vars: dict[str, Any], secrets: Sequence[str],
                  log_lines: int = 20, evidence: Sequence[Mapping[str, Any]] = (), privilege: str = "become",
                  timeout: int = 120, executor_policy: str = "", settle_seconds: float = 0.0) -> Mapping[str, Any]:
    """Run service_check on the task's host through the action's connection; the result is redacted. A host that does
    not answer raises HostUnreachable. ``evidence``: the guard's allowed evidence commands, read for a service that
    fails (with ``privilege``, each within ``timeout`` seconds). ``settle_seconds``: how long a healthy service is
    watched before it counts as healthy (a service's own ``settle_seconds`` in its place; 0: checked once).
    ``executor_policy``: the version of the policy the
    controller judges with, for the executor on the host to check under, as root (the module runs as the connection's
    account); empty: the module checks itself."""
    args: dict[str, Any] = {"services": [_declared(s) for s in services], "log_lines": log_lines, "settle_seconds": settle_seconds}
    if evidence:
        args.update(evidence_commands=list(evidence), evidence_privilege=privilege, evidence_timeout=timeout)
    if executor_policy:
        args.update(through_executor=True, policy_version=executor_policy, redact_values=list(secrets))
    return _module(action, SERVICE_CHECK, args, task_vars, secrets)


def _module(action: Any, name: str, args: Mapping[str, Any], task_vars: dict[str, Any], secrets: Sequence[str]) -> Mapping[str, Any]:
    """Run one of the collection's modules on the task's host through the action's connection; the result is redacted.
    A host that does not answer raises HostUnreachable."""
    try:
        answered = action._execute_module(module_name=name, module_args=dict(args), task_vars=task_vars)
    except AnsibleConnectionFailure as exc:
        raise HostUnreachable("the host did not answer", field="host", value=task_vars.get("inventory_hostname"),
                              hint=redact(str(exc), secrets)) from exc
    if answered.get("unreachable"):
        raise HostUnreachable("the host did not answer", field="host", value=task_vars.get("inventory_hostname"),
                              hint=redact(str(answered.get("msg", "")), secrets))
    if answered.get("failed") and ("module_stderr" in answered or "module_stdout" in answered):
        raise _could_not_run(name, redact(answered, secrets), task_vars)
    if answered.get("failed"):
        raise AnsibleActionFail(f"{name} failed: {redact(answered.get('msg', answered), secrets)}")
    return redact(answered, secrets)  # type: ignore[no-any-return]


def _could_not_run(name: str, answered: Mapping[str, Any], task_vars: Mapping[str, Any]) -> ExecutorError:
    """A module that gave no answer at all (Ansible's "Module result deserialization failed", "MODULE FAILURE"): the
    host's interpreter, or what ran instead of it, said why on its stderr (``pyenv: python3.13: command not found``),
    which Ansible keeps beside its own message; that is the cause a person needs."""
    said = [line.strip() for line in f"{answered.get('module_stderr') or ''}\n{answered.get('module_stdout') or ''}".splitlines() if line.strip()]
    cause = clip(" | ".join(said[:3]), 400) if said else "nothing on its stdout or stderr"
    return ExecutorError(
        f"{name} could not run on the host: {answered.get('msg') or 'no answer'}; the host said: {cause!r} (rc {answered.get('rc', 'unknown')})",
        field="ansible_python_interpreter", value=task_vars.get("ansible_python_interpreter", "auto (discovered by Ansible)"),
        hint="point ansible_python_interpreter at a Python 3 that runs on the host; `ansible HOST -m ansible.builtin.ping` shows the same error")


@dataclass
class HostEvidence:
    """Reads the evidence commands over the play's own connection, in one module call: they are read-only and the
    guard allowed each, so they need no ansible-runner run of their own (a Python and Ansible start per host). Steps
    that change the host always run through ansible-runner."""

    action: Any
    task_vars: dict[str, Any]
    secrets: Sequence[str]
    privilege: str
    step_timeout: int

    def run(self, target: Target, steps: Sequence[RunStep], *, purpose: str, stop: Callable[[], bool] | None = None,
            started: Callable[[str], None] | None = None, timeout: float | None = None, alone: bool = False) -> RunReport:
        limit = self.step_timeout if timeout is None else max(1, min(self.step_timeout, int(timeout)))
        args = {"commands": [{"argv": list(step.argv), "become": step.become} for step in steps], "privilege": self.privilege,
                "timeout": limit}
        began = time.monotonic()
        try:
            read = _module(self.action, EVIDENCE, args, self.task_vars, self.secrets)
        except AnsibleActionFail as exc:
            raise ExecutorError("the evidence commands could not run", field="evidence", value=[step.argv for step in steps],
                                hint=str(exc)) from exc
        results = tuple(StepResult.from_evidence(step.argv, answer) for step, answer in zip(steps, read["results"], strict=True))
        return RunReport(results=results, artifacts="", duration_s=time.monotonic() - began)
