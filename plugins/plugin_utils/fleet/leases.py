"""Leases: one row in memory per remediation running, shared by every fork and job of a state dir.

A lease says who runs what where: the caps of the blast radius count them, and a lease whose owner is gone (a job
killed mid-remediation) tells the next run what was interrupted. An owner is a process named by the controller it
runs on, its pid and its start time (pids are reused); on another controller only the lease's expiry can tell.
"""

from __future__ import annotations

import os
import socket
from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, Failure, Hold, StepResult

# What a run cut off with its job had done on the host, told by whoever ran it (runner.steps_started reads
# ansible-runner's events): the run's directory as the lease kept it, the plan's steps and the host. The store keeps
# the directory and never reads what is in it.
StepsStarted = Callable[[str, Sequence[Sequence[str]], str], list[StepResult]]


@dataclass(frozen=True)
class BlastRadius:
    """How far healing may reach at once: remediations running at the same time across every fork and job that shares
    the memory, hosts remediated per run and remediation attempts per run (``run_id`` names the run, shared by its
    forks); 0 is no cap. And the run's error threshold: past ``max_fail_percentage`` of its ``run_hosts`` hosts with a
    remediation that failed verification, it halts (None: never)."""

    max_running: int = 0
    max_hosts_per_run: int = 0
    max_attempts_per_run: int = 0
    run_id: str = ""
    max_fail_percentage: int | None = None
    run_hosts: int = 0


@dataclass(frozen=True)
class LeaseRequest:
    """One remediation asking for a lease: where it belongs (the run's caps), what it is (the episode it becomes if its
    owner dies first), who owns it and until when; and what tells, of the leases it finds ended, what each had started."""

    radius: BlastRadius
    incident_id: str
    failure: Failure
    attempt: Attempt
    at: float
    ttl: float
    owner: str
    steps_started: StepsStarted
    executed_plan_id: str | None = None
    # the heal the incident relapsed from: its episode names it, interrupted or not
    relapsed_from: int | None = None


@dataclass(frozen=True)
class LeaseRefusal:
    """Why a remediation gets no lease now: a cap or the run's budget is spent (``cap``: its option; ``until``: when a
    slot frees at the latest, None when only the next run has one), or (``elsewhere``) another run is remediating the
    same service on the same host."""

    why: str
    elsewhere: bool = False
    cap: str = ""
    until: float | None = None

    def hold(self, radius: BlastRadius) -> Hold:
        """The spent cap as the person reads it: the next run takes the remediation up; a run with a higher cap (the
        role's variable, the heal's option of the same name; 0 is none) lifts it now."""
        setting = getattr(radius, self.cap)
        return Hold(self.cap, self.why, f"ansible-playbook sentinel.heal.heal -i INVENTORY -e autoheal_{self.cap}={setting + 1} (a higher cap; "
                    "0 is none)", until=self.until, ends="until this run ends")


def process_owner(pid: int | None = None) -> str:
    """``CONTROLLER/PID/STARTTIME`` of a process on this controller (this one by default)."""
    pid = os.getpid() if pid is None else pid
    return f"{socket.gethostname()}/{pid}/{_start_time(pid)}"


def owner_is_gone(owner: str) -> bool:
    """Whether the owner of a lease has certainly ended: a process of this controller that no longer runs (or whose pid
    now belongs to another process). An owner on another controller is never known to be gone."""
    controller, _sep, rest = owner.partition("/")
    pid, _sep, started = rest.partition("/")
    if controller != socket.gethostname() or not pid.isdigit():
        return False
    return _start_time(int(pid)) != started


def _start_time(pid: int) -> str:
    """The start time of a running process; "gone" for one that has ended (a zombie, not yet waited for, has too)."""
    try:
        fields = Path(f"/proc/{pid}/stat").read_text(encoding="ascii").rsplit(")", 1)[1].split()
    except OSError:
        return "gone"
    return "gone" if len(fields) < 20 or fields[0] in ("Z", "X") else fields[19]
