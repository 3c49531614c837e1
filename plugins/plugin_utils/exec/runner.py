"""The executor: runs guarded steps on inventory hosts with ansible-runner.

One ansible-runner run per call, for one host or for several (each with its own steps, under Ansible's free strategy,
so no host waits for another): a generated task file per host with one ``ansible.builtin.command`` task per step
(argv, never a shell), ``become`` where the policy's rule says so, a timeout per step and for the run, output capped,
and the run's artifacts kept under the state directory for audit.
The host is reached with the connection settings the play resolved for it, so the run goes
where the play goes, with the same user, key, port and ssh arguments, and with ssh keepalives: a host whose link is cut
mid-run is unreachable within seconds, not after the step's timeout. Where the play's ssh arguments carry keepalives
the run shares the play's ssh masters; where they do not, it adds them on masters of its own.

ansible-runner starts ansible-playbook in a session of its own, which outlives the process that started it: a
leash (exec/leash.py) kills that session when the process that started the run dies (a job killed with SIGKILL), so
no step of a dead job runs on. What a run is made of, and the task file its steps become, is exec/steps.py.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import time
import uuid
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.module_utils._guard.redact import redact
from ansible_collections.sentinel.heal.plugins.module_utils._host.executor import REFUSED
from ansible_collections.sentinel.heal.plugins.module_utils._text import clip
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ExecutorError, HostUnreachable, JobGone
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.leash import Leash
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.steps import PLAYBOOK, RunReport, RunStep, Target, executor_answer, host_tasks
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import StepResult

# Environment variables whose value is a secret never reach the run (ansible-runner writes the
# whole environment of a run into its artifacts).
_SECRET_ENV = re.compile(r"(KEY|TOKEN|SECRET|PASS|CREDENTIAL|AUTH)", re.IGNORECASE)
_ENV_ALLOWED_DESPITE_NAME = frozenset({"SSH_AUTH_SOCK", "ANSIBLE_PRIVATE_KEY_FILE"})
# ansible-runner's own stdout callback, which it puts in ANSIBLE_STDOUT_CALLBACK of the runs it starts
_RUNNER_DISPLAY = "awx_display"


STEP_PRIVILEGES = ("become", "sudo", "executor")
# what a task may ask for: ``auto`` is made the host's own (the executor where it is installed) before anything runs
TASK_STEP_PRIVILEGES = (*STEP_PRIVILEGES, "auto")
# coreutils' timeout exits with 124 when the step ran out of time and ended on SIGTERM
TIMED_OUT_RC = 124
# An ssh connection whose peer stops answering for this long (interval x count) fails the step as unreachable.
SSH_KEEPALIVE = "-o ServerAliveInterval=5 -o ServerAliveCountMax=3"
# Runs whose keepalive the play's ssh arguments lack get masters apart from the play's (beside them, suffixed): ssh sets a
# master's keepalive when it starts it, and the play's masters were started without one.
DEFAULT_CONTROL_PATH_DIR = "~/.ansible/cp"
OWN_CONTROL_PATH_SUFFIX = "-sentinel-heal"
# A unix socket's path holds at most 107 bytes; ssh's ControlPath under Ansible is DIR/ plus a 10-character hash, and ssh
# first binds it with a 17-character temporary suffix.
MAX_CONTROL_PATH_DIR = 107 - 1 - 10 - 17


class RunnerExecutor:
    """Runs steps on a host. ``privilege`` is how a step that needs root gets it: Ansible's become (which
    runs a shell and Python as root, so the host's sudo rule must allow anything), ``sudo -n -- ARGV``
    with no become, so a sudo rule on the host can allow exactly the commands the policy can allow, or ``executor``:
    every step, root or not, is a request to the executor on the host (sentinel.heal.host), which judges it again
    and runs it or refuses it."""

    def __init__(self, artifacts_root: str | Path, *, step_timeout: int = 120, output_limit: int = 4000, secrets: Sequence[str] = (),
                 privilege: str = "become") -> None:
        if privilege not in STEP_PRIVILEGES:
            raise ExecutorError("unknown way to run a step as root", field="step_privilege", value=privilege,
                                hint=f"one of {', '.join(STEP_PRIVILEGES)}")
        self.artifacts_root = Path(artifacts_root).expanduser()
        self.privilege = privilege
        self.step_timeout = step_timeout
        self.output_limit = output_limit
        self.secrets = tuple(secrets)
        # the job this process works for (an Ansible worker's ansible-playbook): once it is gone, so are the runs
        self._job = os.getppid()

    def run(self, target: Target, steps: Sequence[RunStep], *, purpose: str, stop: Callable[[], bool] | None = None,
            started: Callable[[str], None] | None = None, timeout: float | None = None) -> RunReport:
        """Run the steps in one ansible-runner run; ``stop``, polled while it runs, cancels it (the steps not yet
        started do not start); ``started`` is told the run's directory before it starts; ``timeout`` caps the whole
        run below the steps' own timeouts."""
        outcome = self.run_together([(target, steps)], purpose=purpose, stop=stop, started=started, timeout=timeout)[target.name]
        if isinstance(outcome, HostUnreachable):
            raise outcome
        return outcome

    def run_together(self, members: Sequence[tuple[Target, Sequence[RunStep]]], *, purpose: str, stop: Callable[[], bool] | None = None,
                     started: Callable[[str], None] | None = None, timeout: float | None = None) -> dict[str, RunReport | HostUnreachable]:
        """Run each host's steps in one ansible-runner run (the hosts share the connection secrets of the first: the
        caller groups them so); by host, its report, or HostUnreachable when it did not answer."""
        if not members or any(not steps for _target, steps in members):
            raise ExecutorError("nothing to run", field="steps", value=[], hint="the planner must not hand over an empty plan")
        import ansible_runner  # imported here: loading it costs time and is needed only when a step runs

        first = members[0][0]
        run_dir = self.artifacts_root / first.name / f"{time.strftime('%Y%m%dT%H%M%S')}-{purpose}-{uuid.uuid4().hex[:8]}"
        (run_dir / "project" / "hosts").mkdir(parents=True, mode=0o700)
        (run_dir / "project" / "steps.yml").write_text(PLAYBOOK, encoding="utf-8")
        inventory: dict[str, Any] = {}
        for number, (target, steps) in enumerate(members):
            tasks = host_tasks(target.name, steps, self.step_timeout, self.privilege)
            (run_dir / "project" / "hosts" / f"{number}.yml").write_text(tasks, encoding="utf-8")
            inventory[target.name] = dict(_with_keepalive(target.host_vars), sentinel_heal_member=number)
        # how often ansible-runner looks at the cancel callback (the kill switch, the time limit, the job): every second
        (run_dir / "env").mkdir(mode=0o700)
        (run_dir / "env" / "settings").write_text("pexpect_timeout: 1\n", encoding="utf-8")
        if started is not None:
            started(str(run_dir))
        events: dict[tuple[str, int], dict[str, Any]] = {}
        run_timeout = self.step_timeout * max(len(steps) for _target, steps in members) + 60
        time_limit = run_timeout if timeout is None else max(1.0, min(run_timeout, timeout))
        try:
            leash = Leash()
        except OSError as exc:  # no process left to start (a process limit, memory): nothing ran
            raise ExecutorError("the run's watcher could not start, so the run did not", field="artifacts", value=str(run_dir),
                                hint=f"{exc}; the controller is out of processes or memory") from exc
        began = time.monotonic()
        ended = ""
        stopped = False

        def cancel() -> bool:
            # ansible-runner's own cancel and timeout kill ansible-playbook's process group only, and Ansible's workers
            # have sessions of their own: past the limit, once the job is gone, or told to stop (the kill switch), the
            # leash kills the run's whole tree, so no worker hangs on, or runs its step on, after the run
            nonlocal ended, stopped
            if os.getppid() != self._job:
                ended = "job gone"
            elif time.monotonic() - began > time_limit:
                ended = "timed out"
            if ended:
                leash.kill()
                return True
            if not stopped and stop is not None and stop():
                # told to stop, the tree is killed but ansible-runner reads on to the end of its output: the events of
                # steps that ran before the kill are still in the pipe, and a step that ran is never reported as not run
                leash.kill()
                stopped = True
            return False

        try:
            runner = ansible_runner.run(
                private_data_dir=str(run_dir),
                playbook="steps.yml",
                inventory={"all": {"hosts": inventory}},
                # every member at once: Ansible's configured forks (5 by default) would run a shared run's hosts in batches
                forks=len(members),
                extravars=dict(first.secret_vars) or None,
                envvars=_environment(first),
                ident="run",
                quiet=True,
                event_handler=lambda event: _collect(leash.hold(event), events),
                cancel_callback=cancel,
            )
        except Exception as exc:
            raise ExecutorError("ansible-runner could not start the run", field="artifacts", value=str(run_dir), hint=str(exc)) from exc
        finally:
            leash.release()
            # Passwords were handed over in this file only for the run; the artifacts stay, they do not.
            (run_dir / "env" / "extravars").unlink(missing_ok=True)
            _redact_artifacts(run_dir / "artifacts", self.secrets)
        duration = time.monotonic() - began
        if ended == "job gone":
            raise JobGone("the job that started this remediation was killed: its run was killed too", field="artifacts",
                          value=str(run_dir), hint="the next run records the remediation as interrupted and takes the host up")
        if ended:
            raise ExecutorError(f"the run passed its time limit of {time_limit:g} s and was killed", field="artifacts", value=str(run_dir),
                                hint="see the run's stdout in the artifacts directory; a step that hangs is killed at step_timeout")
        if not stopped and (runner.status in ("timeout", "error") or (runner.status == "failed" and not events)):
            raise ExecutorError(
                f"the run ended with status {runner.status} before reporting its steps", field="artifacts", value=str(run_dir),
                hint="see the run's stdout in the artifacts directory",
            )
        outcomes: dict[str, RunReport | HostUnreachable] = {}
        for target, steps in members:
            mine = {index: event for (host, index), event in events.items() if host == target.name}
            unreachable = next((event["msg"] for event in mine.values() if event["unreachable"]), None)
            if unreachable is not None:
                outcomes[target.name] = HostUnreachable("the host did not answer", field="host", value=target.name, hint=unreachable)
                continue
            results = tuple(self._result(index, step, mine.get(index), stopped) for index, step in enumerate(steps))
            outcomes[target.name] = RunReport(results=results, artifacts=str(run_dir), duration_s=duration, stopped=stopped)
        return outcomes

    def _result(self, index: int, step: RunStep, event: Mapping[str, Any] | None, stopped: bool) -> StepResult:
        if event is None:
            return StepResult(argv=step.argv, status="skipped", stderr="not run: " + ("the run was stopped" if stopped else "an earlier step failed"))
        if "res" not in event:  # started, and the run was stopped or killed before it reported
            return StepResult(argv=step.argv, status="interrupted", stderr="started; the run was stopped before it reported")
        res = event["res"]
        failed = event["failed"]
        if self.privilege == "executor":
            res, failed, refused = executor_answer(res)
            if refused:
                return StepResult(argv=step.argv, status="refused", rc=REFUSED, stderr=clip(redact(refused, self.secrets), self.output_limit),
                                  duration_s=_task_duration(event["res"]))
        if failed and res.get("rc") == TIMED_OUT_RC and self.privilege != "executor":  # (the executor says so itself)
            res = dict(res, stderr=f"{res.get('stderr', '')}\nkilled on the host at its timeout of {self.step_timeout} s".strip())
        return StepResult(
            argv=step.argv,
            status="failed" if failed else "ok",
            rc=res.get("rc"),
            stdout=clip(redact(str(res.get("stdout", "")), self.secrets), self.output_limit, keep="middle"),
            stderr=clip(redact(str(res.get("stderr", "") or ("" if not failed else res.get("msg", ""))), self.secrets), self.output_limit,
                        keep="middle"),
            duration_s=_task_duration(res),
        )


def steps_started(run_dir: str | Path, steps: Sequence[Sequence[str]], host: str) -> list[StepResult]:
    """What a run cut off with its job had done on the host, from the events ansible-runner wrote as it went: each
    step's result, ``interrupted`` for one that started and never reported, ``skipped`` for one that never started;
    ``unknown`` for every step when the run's directory is not on this controller (the job ran on another node)."""
    if not Path(run_dir).is_dir():
        return [StepResult(argv=tuple(argv), status="unknown", stderr=f"not known here: the run's directory {run_dir} is on the controller "
                           "the job ran on") for argv in steps]
    seen: dict[int, dict[str, Any]] = {}
    for path in sorted((Path(run_dir) / "artifacts" / "run" / "job_events").glob("*.json")):
        try:
            event = json.loads(path.read_text(encoding="utf-8"))
        except (OSError, ValueError):
            continue  # a file the killed run was still writing
        data = event.get("event_data") or {}
        task = str(data.get("task", ""))
        if data.get("host") == host and task.startswith("step ") and task[5:].isdigit():
            index = int(task[5:]) - 1
            if event.get("event") == "runner_on_start":
                seen.setdefault(index, {})
            elif event.get("event") in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable"):
                seen[index] = {"failed": event["event"] != "runner_on_ok", "res": data.get("res") or {}}
    results = []
    for index, argv in enumerate(steps):
        step = seen.get(index)
        if step is None:
            results.append(StepResult(argv=tuple(argv), status="skipped", stderr="not started: the job was killed"))
        elif not step:
            results.append(StepResult(argv=tuple(argv), status="interrupted", stderr="started; the job was killed before it reported"))
        else:
            res = step["res"]
            results.append(StepResult(argv=tuple(argv), status="failed" if step["failed"] else "ok", rc=res.get("rc"),
                                      stdout=clip(str(res.get("stdout", "")), 4000, keep="middle"),
                                      stderr=clip(str(res.get("stderr", "") or res.get("msg", "")), 4000, keep="middle"),
                                      duration_s=_task_duration(res)))
    return results


def remove_runs(artifacts_root: str | Path, *, before: float, keep: set[str], dry_run: bool = False) -> int:
    """Delete the run directories (``HOST/RUN``) last changed before the time that no episode still
    points to; returns how many went (or would, with ``dry_run``). A run being written now is newer
    than any cutoff in the past."""
    removed = 0
    for host_dir in sorted(Path(artifacts_root).expanduser().glob("*")):
        if not host_dir.is_dir() or host_dir.is_symlink():
            continue
        for run_dir in sorted(host_dir.iterdir()):
            if run_dir.is_dir() and not run_dir.is_symlink() and str(run_dir) not in keep and run_dir.stat().st_mtime < before:
                if not dry_run:
                    shutil.rmtree(run_dir)
                removed += 1
        if not dry_run and not any(host_dir.iterdir()):
            host_dir.rmdir()
    return removed


def _with_keepalive(host_vars: Mapping[str, Any]) -> dict[str, Any]:
    """The play's connection settings with ssh keepalives: the play's own masters when its ssh arguments set keepalives
    (a run then opens no connection of its own: at 100 hosts, 100 key exchanges fewer), else masters of the runs' own
    with keepalives added."""
    merged = dict(host_vars)
    if str(merged.get("ansible_connection", "ssh")).rsplit(".", 1)[-1] != "ssh":
        return merged
    said = " ".join(str(merged.get(name, "")) for name in ("ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args"))
    if "ServerAlive" in said:
        return merged
    merged["ansible_ssh_extra_args"] = f"{merged.get('ansible_ssh_extra_args', '')} {SSH_KEEPALIVE}".strip()
    play_dir = merged.get("ansible_control_path_dir") or DEFAULT_CONTROL_PATH_DIR
    own_dir = f"{play_dir}{OWN_CONTROL_PATH_SUFFIX}"
    # under a long home the suffix would not fit in a socket's path: the play's own masters are shared then
    merged["ansible_control_path_dir"] = own_dir if len(os.path.expanduser(own_dir)) <= MAX_CONTROL_PATH_DIR else play_dir
    return merged


def _redact_artifacts(artifacts: Path, secrets: Sequence[str]) -> None:
    """The artifacts are kept for audit: the host output in them is masked like everywhere else."""
    for path in artifacts.rglob("*"):
        if path.is_file():
            text = path.read_text(encoding="utf-8", errors="replace")
            masked = redact(text, secrets)
            if masked != text:
                path.write_text(masked, encoding="utf-8")


def _collect(event: Mapping[str, Any], events: dict[tuple[str, int], dict[str, Any]]) -> bool:
    kind = event.get("event", "")
    data = event.get("event_data") or {}
    task = str(data.get("task", ""))
    if kind == "runner_on_start" and task.startswith("step "):
        events.setdefault((str(data.get("host", "")), int(task.split()[1]) - 1), {"started": True, "unreachable": False})
    elif kind in ("runner_on_ok", "runner_on_failed", "runner_on_unreachable") and task.startswith("step "):
        index = int(task.split()[1]) - 1
        res = data.get("res") or {}
        events[(str(data.get("host", "")), index)] = {
            "res": res,
            "failed": kind != "runner_on_ok",
            "unreachable": kind == "runner_on_unreachable",
            "msg": str(res.get("msg", "")),
        }
    return True


# Each host runs its own task file, at its own pace (the free strategy: no host waits for another's step).
def _environment(target: Target) -> dict[str, str]:
    env = {name: value for name, value in os.environ.items() if name in _ENV_ALLOWED_DESPITE_NAME or not _SECRET_ENV.search(name)}
    removed = set(os.environ) - set(env)
    if target.config_file:
        env["ANSIBLE_CONFIG"] = target.config_file
    env["PATH"] = _path_with_ansible_playbook(env.get("PATH", os.defpath))
    env.update(ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0")  # the artifacts are read by humans and tools
    # Inside a job that ansible-runner itself runs (AWX, an ansible-rulebook run_playbook), the job's stdout callback
    # is ansible-runner's awx_display: handed down, the run's awx_display would load itself as its own display and
    # the run fail before its first task. The run gets the callback the job's runner replaced instead.
    if env.get("ANSIBLE_STDOUT_CALLBACK") == _RUNNER_DISPLAY:
        env["ANSIBLE_STDOUT_CALLBACK"] = os.environ.get("ORIGINAL_STDOUT_CALLBACK", "")
    # ansible-runner starts from os.environ and only adds envvars on top: blank what must not pass.
    env.update({name: "" for name in removed})
    return env


def _path_with_ansible_playbook(path: str) -> str:
    """The run uses the ansible-playbook of the running Ansible (a virtualenv need not be on PATH)."""
    running = Path(sys.executable).parent
    if (running / "ansible-playbook").exists():
        path = f"{running}{os.pathsep}{path}"
    if not shutil.which("ansible-playbook", path=path):
        raise ExecutorError("ansible-playbook not found", field="PATH", value=path, hint="install ansible-core on the controller")
    return path


def _task_duration(res: Mapping[str, Any]) -> float:
    delta = str(res.get("delta", ""))
    match = re.match(r"^(\d+):(\d+):(\d+(?:\.\d+)?)$", delta)
    if not match:
        return 0.0
    hours, minutes, seconds = match.groups()
    return int(hours) * 3600 + int(minutes) * 60 + float(seconds)
