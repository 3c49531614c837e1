"""Remediations of one run that start at about the same time share one ansible-runner run.

Each fork of a play heals its own host in a process of its own, and an ansible-runner run is a Python and Ansible start
(about a second of CPU): twenty hosts remediated at once were twenty such starts. So the forks meet: the first to
remediate opens a rendezvous (a Unix socket in Linux's abstract namespace, named for the run), the others that arrive
while it gathers hand it their host and steps, and it runs every one of them in one ansible-runner run (each host with
its own steps, at its own pace) and hands each its results. Steps are not judged again here: each fork's guard (and
its lease, its canary, its kill switch) decided before it came. Only processes of the same user are heard, and hosts
that need other connection secrets than the gatherer's run on their own. Off Linux, or alone in its run, a fork runs
its steps by itself.
"""

from __future__ import annotations

import contextlib
import hashlib
import json
import os
import socket
import struct
import time
from dataclasses import asdict
from typing import Any, Callable, Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ExecutorError, HostUnreachable, JobGone
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.runner import RunnerExecutor
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.steps import HostRequest, RunReport, RunStep, Target
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import StepResult

# A gatherer closes once this long passed without a new fork joining, or once its whole run joined, and never later
# than the window after it opened.
GATHER_GAP_S = 0.5
GATHER_WINDOW_S = 3.0
_POLL_S = 1.0
_CREDENTIALS = struct.Struct("3i")  # SO_PEERCRED: pid, uid, gid


class Rendezvous:
    """An executor that runs a fork's remediation together with the other forks' of its run (``key``, ``hosts`` hosts)."""

    def __init__(self, runner: RunnerExecutor, *, key: str, hosts: int, gap: float = GATHER_GAP_S, window: float = GATHER_WINDOW_S) -> None:
        self.runner = runner
        self.key = key
        self.hosts = hosts
        self.gap = gap
        self.window = window
        self.step_timeout = runner.step_timeout
        # forks that get root another way (become, sudo, the executor on the host) never share a run: its task files
        # are written one way
        self._name = "\0sentinel-heal-" + hashlib.sha256(f"{key}\0{runner.artifacts_root}\0{runner.privilege}".encode()).hexdigest()[:32]
        self._job = os.getppid()

    def run(self, target: Target, steps: Sequence[RunStep], *, purpose: str, stop: Callable[[], bool] | None = None,
            started: Callable[[str], None] | None = None, timeout: float | None = None, alone: bool = False) -> RunReport:
        if alone or self.hosts <= 1:
            return self.runner.run(target, steps, purpose=purpose, stop=stop, started=started, timeout=timeout)
        name = f"{self._name}-{purpose}"
        for _election in range(3):
            gathering = _listen(name)
            if gathering is not None:
                return self._gather(gathering, target, steps, purpose=purpose, stop=stop, started=started, timeout=timeout)
            joined = self._join(name, target, steps, purpose=purpose, stop=stop, started=started, timeout=timeout)
            if joined is not None:
                return joined
        return self.runner.run(target, steps, purpose=purpose, stop=stop, started=started, timeout=timeout)

    def _gather(self, gathering: socket.socket, target: Target, steps: Sequence[RunStep], *, purpose: str,
                stop: Callable[[], bool] | None, started: Callable[[str], None] | None, timeout: float | None) -> RunReport:
        """Gather the forks that join, run everyone's steps in one run, and answer each."""
        joined: list[tuple[socket.socket, Target, list[RunStep], float | None]] = []
        opened = time.monotonic()
        with gathering:
            while len(joined) + 1 < self.hosts and time.monotonic() - opened < self.window:
                gathering.settimeout(min(self.gap, max(0.01, self.window - (time.monotonic() - opened))))
                try:
                    conn, _address = gathering.accept()
                except TimeoutError:
                    break
                member = _hear(conn)
                if member is None:
                    continue
                if dict(member[1].secret_vars) != dict(target.secret_vars):
                    _say(member[0], {"alone": True})  # one run hands over one set of connection secrets
                    member[0].close()
                    continue
                joined.append(member)
        limits = [limit for limit in [timeout, *(member[3] for member in joined)] if limit is not None]

        def run_started(run_dir: str) -> None:
            if started is not None:
                started(run_dir)
            for conn, *_rest in joined:
                _say(conn, {"run_dir": run_dir})
                try:
                    _read(conn, timeout=10.0)  # its lease knows the run before any step starts
                except (TimeoutError, OSError, ValueError):
                    continue  # a fork that does not answer learns how its steps went, or its job is gone

        try:
            outcomes = self.runner.run_together([(target, list(steps)), *((other, other_steps) for _conn, other, other_steps, _limit in joined)],
                                                purpose=purpose, stop=stop, started=run_started,
                                                timeout=max(limits) if len(limits) == len(joined) + 1 else None)
        except ExecutorError as exc:
            for conn, *_rest in joined:
                _say(conn, {"error": {"kind": type(exc).__name__, "message": exc.message, "field": exc.field, "value": exc.value, "hint": exc.hint}})
                conn.close()
            raise
        for conn, other, _steps, _limit in joined:
            _say(conn, _answer(outcomes[other.name]))
            conn.close()
        mine = outcomes[target.name]
        if isinstance(mine, HostUnreachable):
            raise mine
        return mine

    def _join(self, name: str, target: Target, steps: Sequence[RunStep], *, purpose: str, stop: Callable[[], bool] | None,
              started: Callable[[str], None] | None, timeout: float | None) -> RunReport | None:
        """Hand the gatherer this fork's host and steps and wait for their results; None when nobody gathers now. ``stop``
        is polled while it waits, as the run would (its lease's heartbeat beats with it); the gatherer's run answers to
        the kill switch for everyone."""
        conn = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        try:
            conn.connect(name)
            _say(conn, {"host": target.name, "host_vars": dict(target.host_vars), "secret_vars": dict(target.secret_vars),
                        "steps": [asdict(step) for step in steps], "timeout": timeout})
        except (OSError, TypeError, ValueError):  # nobody gathers, or a connection variable JSON cannot carry
            conn.close()
            return None
        began, run_dir = time.monotonic(), ""
        limit = (timeout if timeout is not None else self.step_timeout * len(steps) + 60) + 60
        with conn:
            while True:
                try:
                    said = _read(conn, timeout=_POLL_S)
                except TimeoutError:
                    if stop is not None:
                        stop()
                    if os.getppid() != self._job:
                        raise JobGone("the job that started this remediation was killed", field="artifacts", value=run_dir,
                                      hint="the next run records the remediation as interrupted and takes the host up") from None
                    if time.monotonic() - began > limit:
                        raise ExecutorError("the shared run did not answer in time", field="artifacts", value=run_dir,
                                            hint="see the run's stdout in the artifacts directory") from None
                    continue
                if said is None:
                    if not run_dir:
                        return None  # the gatherer went before it ran anything: meet again
                    raise JobGone("the process that ran this remediation with others' ended before it answered", field="artifacts",
                                  value=run_dir, hint="the next run records the remediation as interrupted and takes the host up")
                if said.get("alone"):
                    return self.runner.run(target, steps, purpose=purpose, stop=stop, started=started, timeout=timeout)
                if "run_dir" in said:
                    run_dir = said["run_dir"]
                    if started is not None:
                        started(run_dir)
                    _say(conn, {"ack": True})
                    continue
                return _outcome(said, target)


def _listen(name: str) -> socket.socket | None:
    """A gathering socket, or None when another fork gathers under that name now (or sockets cannot be named so here)."""
    gathering = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
    try:
        gathering.bind(name)
        gathering.listen(128)
    except OSError:
        gathering.close()
        return None
    return gathering


def _hear(conn: socket.socket) -> tuple[socket.socket, Target, list[RunStep], float | None] | None:
    """What a fork that joined asks, when it is a process of this user and says it whole."""
    peer = _CREDENTIALS.unpack(conn.getsockopt(socket.SOL_SOCKET, socket.SO_PEERCRED, _CREDENTIALS.size))
    try:
        asked = _read(conn, timeout=5.0) if peer[1] == os.getuid() else None
    except (TimeoutError, OSError):
        asked = None
    if not asked:
        conn.close()
        return None
    target = Target(name=asked["host"], host_vars=asked["host_vars"], secret_vars=asked["secret_vars"])
    steps = [RunStep(argv=tuple(step["argv"]), become=bool(step["become"]), may_fail=bool(step["may_fail"]), on_host=_on_host(step["on_host"]),
                     restore_test=tuple(step["restore_test"])) for step in asked["steps"]]
    return conn, target, steps, asked.get("timeout")


def _on_host(said: dict[str, Any] | None) -> HostRequest | None:
    """What a joined fork's step tells the executor on its host, as the fork sent it."""
    if said is None:
        return None
    return HostRequest(**dict(said, plan=tuple(tuple(argv) for argv in said["plan"])))


def _answer(outcome: RunReport | HostUnreachable) -> dict[str, Any]:
    if isinstance(outcome, HostUnreachable):
        return {"unreachable": outcome.hint or outcome.message}
    return {"report": {"results": [asdict(result) for result in outcome.results], "artifacts": outcome.artifacts,
                       "duration_s": outcome.duration_s, "stopped": outcome.stopped}}


def _outcome(said: dict[str, Any], target: Target) -> RunReport:
    if "unreachable" in said:
        raise HostUnreachable("the host did not answer", field="host", value=target.name, hint=said["unreachable"])
    if "error" in said:
        error = said["error"]
        kind = JobGone if error["kind"] == "JobGone" else ExecutorError
        raise kind(error["message"], field=error["field"], value=error["value"], hint=error["hint"])
    report = said["report"]
    results = tuple(StepResult(**dict(result, argv=tuple(result["argv"]))) for result in report["results"])
    return RunReport(results=results, artifacts=report["artifacts"], duration_s=report["duration_s"], stopped=report["stopped"])


def _say(conn: socket.socket, message: dict[str, Any]) -> None:
    with contextlib.suppress(OSError):  # a fork that went away reads nothing; its own job tells it why
        conn.sendall(json.dumps(message).encode() + b"\n")


def _read(conn: socket.socket, *, timeout: float) -> dict[str, Any] | None:
    """One message, or None when the other side closed; TimeoutError when nothing came in time."""
    conn.settimeout(timeout)
    received = b""
    while not received.endswith(b"\n"):
        chunk = conn.recv(65536)
        if not chunk:
            return None
        received += chunk
    message = json.loads(received)
    return message if isinstance(message, dict) else None
