"""What the heal loop's nodes share: the Toolkit they are built with (from a task's options and the Ansible side of the
task, TaskContext), the state of one incident, the outcomes two nodes return, and what a finished incident comes to
(IncidentOutcome)."""

from __future__ import annotations

import time
import uuid
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Callable, Mapping, Protocol, Sequence, cast

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.investigation import MAX_ROUNDS, Investigation, ReadBudget
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import Diagnosis, LLMUse, Planner
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.adapter import (
    blast_radius,
    executor_policy,
    service_check,
    step_executor,
    target_for_task,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.runner import steps_started
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.steps import RunReport, RunStep, Target
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import FleetIncident
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.kill_switch import KillSwitch
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.leases import BlastRadius, StepsStarted
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.rollout import CanaryKey
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard import approvals
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.host_approval import ApprovalSigner
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import Policy, PolicyContext
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, Failure, Hold, Plan, Verdict
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.engine import FlowTrace
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.relapse import DEFAULT_RELAPSE_WINDOW_S, Relapse
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory, episode_record

# The ranges of the limits' options (sentinel.heal.controller.limits), for the actions that take them.
LIMIT_OPTION_RANGES = {"flap_limit": (0, 100), "flap_window": (60, 7 * 86400), "max_running": (0, 1000), "max_hosts_per_run": (0, 100_000),
                       "max_attempts_per_run": (0, 1_000_000), "incident_timeout": (30, 86400),
                       "max_fail_percentage": (0, 100), "think_rounds": (0, MAX_ROUNDS)}
MODES = ("observe", "review", "autonomous")


class Executor(Protocol):
    """What the loop needs from an executor (RunnerExecutor in production)."""

    step_timeout: int  # seconds each step may run: a remediation's lease expires after all its steps could have run

    def run(self, target: Target, steps: list[RunStep], *, purpose: str, stop: Callable[[], bool] | None = None,
            started: Callable[[str], None] | None = None, timeout: float | None = None, alone: bool = False) -> RunReport:
        """``alone``: run at once, without waiting for other forks of the run to share the run (a canary, which the
        others wait for)."""


Verifier = Callable[[Mapping[str, Any]], Mapping[str, Any]]
# Asks a human whether a plan may run: ("approved" | "denied", who), or None when nobody can be asked.
ApprovalPrompt = Callable[[Failure, Plan, Sequence[Verdict]], tuple[str, str] | None]


@dataclass(frozen=True)
class TaskContext:
    """What the loop needs of the Ansible task that runs it."""

    # the action plugin: exec/adapter.py runs modules on the host through it (service_check, evidence)
    action: Any
    connection: Any
    templar: Any
    task_vars: dict[str, Any]
    check_mode: bool
    diff: bool
    # asks the person at the terminal whether a plan may run (None when nobody can be asked)
    ask_operator: ApprovalPrompt
    # a line for the person who follows the run (Ansible's display, through its queue from the worker)
    show: Callable[[str], None]

    @property
    def host(self) -> str:
        return str(self.task_vars.get("inventory_hostname", "localhost"))


@dataclass
class Toolkit:
    """Everything the nodes use, built once per host by the action plugin."""

    planner: Planner
    policy: Policy
    executor: Executor
    target: Target
    verify: Verifier
    memory: Memory | None
    # what reads the read-only evidence commands (the executor when None)
    evidence_executor: Executor | None = None
    # what a remediation cut off with its job had started, from its run (a lease whose owner died keeps the run's directory)
    steps_started: StepsStarted = steps_started
    check_mode: bool = False
    # read-only evidence commands run before planning (not in check mode, where nothing runs)
    run_evidence: bool | None = None
    ask_approval: ApprovalPrompt | None = None
    # with the executor on the host: signs a person's approval for it (the host does not take the controller's word)
    approval_signer: ApprovalSigner | None = None
    approval_ttl: float = approvals.DEFAULT_TTL_S
    max_attempts: int = 3
    verify_retries: int = 3
    verify_wait: float = 2.0
    # after a unit's RestartSec, how long systemd's own restart may take to make it healthy
    systemd_restart_grace: float = 10.0
    failed_plan_ttl: float = 86400.0
    # the inventory's hosts (names and addresses): probes may reach them and loopback, nothing else
    probe_hosts: AbstractSet[str] = frozenset()
    # the steps go to the host's executor, which does the ownership, mode and directory repairs itself without following
    # a link (step_privilege executor): a directory a service account owns on the way does not send them to a person
    repairs_without_following_links: bool = False
    # the flapping limit: at most this many remediations of a service on a host within the window (0: no limit)
    flap_limit: int = 3
    flap_window: float = 3600.0
    # a failure within this many seconds after a heal of the service on the host is that heal's relapse (0: never)
    relapse_window: float = DEFAULT_RELAPSE_WINDOW_S
    # the blast radius: caps on remediations at once, hosts and attempts per run, shared through memory
    blast_radius: BlastRadius = field(default_factory=BlastRadius)
    # seconds an incident may take from its first diagnosis: no attempt starts and no run goes on past it
    incident_timeout: float = 600.0
    # how far the loop acts on its own (a service's own "mode" wins): observe, review or autonomous
    mode: str = "autonomous"
    # rounds of reads the planner may ask for before it plans, per attempt (0: it plans from the evidence alone)
    think_rounds: int = MAX_ROUNDS
    # the kill switch, read afresh before and during every remediation: what says it is thrown, or None
    suspension: Callable[[], str | None] = lambda: None
    # what holds the loop's hands off a failure (a person's silence, a maintenance marker or window), read before each
    # attempt: the hold (until when, how to lift it), or None
    silence: Callable[[Failure], Hold | None] = lambda failure: None
    # told each node an incident enters, before it runs (the action shows long work on the terminal)
    progress: Callable[[IncidentState, str], None] = lambda state, node: None
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep

    @classmethod
    def from_options(cls, args: Mapping[str, Any], task: TaskContext, *, planner: Planner, policy: Policy, memory: Memory | None,
                     secrets: Sequence[str], approval_signer: ApprovalSigner | None, writes: bool = True, **path_specific: Any) -> Toolkit:
        """The tools of every path that runs steps on the task's host (heal; execute, the plans a person approved), from
        the task's options: the steps' executor and the blast radius it counts in, the host, the verification, the kill
        switch and the limits. Without ``writes`` (check mode, plan, diagnose) nothing runs and the loop writes no
        memory, though the planner and the kill switch still read it. ``path_specific``: what only one path has (heal's
        evidence, prompts, silences, progress)."""
        radius = blast_radius(args, task.task_vars)

        def verify(spec: Mapping[str, Any]) -> Mapping[str, Any]:
            checked = service_check(task.action, [spec], task.task_vars, secrets, args.get("log_lines", 20), settle_seconds=args["settle_seconds"],
                                    executor_policy=executor_policy(args, policy))
            return cast(Mapping[str, Any], checked["services"][0])

        return cls(
            planner=planner,
            policy=policy,
            executor=step_executor(args, secrets, task.task_vars, radius),
            target=target_for_task(task.host, task.connection, task.task_vars, task.templar),
            verify=verify,
            memory=memory if writes else None,
            check_mode=not writes,
            suspension=KillSwitch(memory.database).suspended_because if memory is not None else lambda: None,
            approval_signer=approval_signer,
            verify_retries=args.get("verify_retries", 1),
            verify_wait=args.get("verify_delay", 0.0),
            repairs_without_following_links=args.get("step_privilege", "become") == "executor",
            flap_limit=args.get("flap_limit", 3),
            flap_window=args.get("flap_window", 3600),
            blast_radius=radius,
            incident_timeout=args.get("incident_timeout", 600),
            **path_specific,
        )

    def policy_context(self, failure: Failure) -> PolicyContext:
        """What the guard judges the failure's steps and reads in, on this host."""
        return PolicyContext.from_failure(failure, self.probe_hosts, repairs_without_following_links=self.repairs_without_following_links)


@dataclass(frozen=True)
class DependencyOutcome:
    """How the incident of a service another one needs ended, earlier in this run (loop/dependencies.py)."""

    service: str
    status: str
    reason: str

    def to_dict(self) -> dict[str, str]:
        return {"service": self.service, "status": self.status, "reason": self.reason}


@dataclass
class IncidentState:
    failure: Failure
    incident_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    started_at: float = field(default_factory=time.time)
    attempts: list[Attempt] = field(default_factory=list)
    tried: set[tuple[str, ...]] = field(default_factory=set)
    diagnosis: Diagnosis | None = None
    excluded: frozenset[tuple[str, ...]] = frozenset()
    llm_use: LLMUse | None = None
    # why the LLM last gave no plan in this incident (LLMUse.fallback), until it plans again: the escalation says it
    llm_failure: str | None = None
    # the reads the planner asked for, waiting for the observe node
    investigation: Investigation | None = None
    # characters of read output the incident may still show the planner
    read_budget: ReadBudget = field(default_factory=ReadBudget)
    status: str = ""
    reason: str = ""
    episodes: list[int] = field(default_factory=list)
    # each attempt (by number) as the record node saw it, in the form of an episode (with its "id" in memory, or None)
    attempt_records: dict[int, dict[str, Any]] = field(default_factory=dict)
    plan_id: str | None = None
    approved_plan_id: str | None = None
    awaited_systemd: bool = False
    awaited_dependencies: bool = False
    # the attempts (by number) that were the canary of their plan in the run
    canaries: dict[int, CanaryKey] = field(default_factory=dict)
    changed: bool = False
    warnings: list[str] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)
    # the failing services this one needs, healed before it in this run, and how each ended
    dependencies: tuple[DependencyOutcome, ...] = ()
    # the fleet incident this failure is part of (many hosts fail alike): no plan runs host by host
    fleet_incident: FleetIncident | None = None
    # the heal of this service on this host that the failure came back after, within the relapse window
    relapse: Relapse | None = None

    @property
    def relapsed_from(self) -> int | None:
        return self.relapse.heal.episode_id if self.relapse else None

    @property
    def attempt(self) -> Attempt:
        return self.attempts[-1]

    def log(self, node: str, message: str, *, at: float | None = None) -> None:
        """A line of the incident's timeline; ``at``: when it happened, if not now (a node says what it began when it
        writes the state, after the work)."""
        self.timeline.append({"at": round(time.time() if at is None else at, 3), "service": self.failure.service, "node": node,
                              "message": message})


@dataclass(frozen=True)
class Suspended:
    """The kill switch was thrown before the remediation started."""

    describe: str


@dataclass(frozen=True)
class Deferred:
    """No lease for this remediation now: the blast radius is spent, or another run remediates the same incident."""

    why: str
    elsewhere: bool = False
    # the spent cap of the blast radius (none when another run remediates the incident)
    hold: Hold | None = None


@dataclass(frozen=True)
class IncidentOutcome:
    state: IncidentState
    trace: FlowTrace
    # where the plans came from besides memory and runbooks: the LLM's model, or "" when the offline planner planned alone
    llm_model: str = ""

    def to_dict(self) -> dict[str, Any]:
        state = self.state
        last = state.attempts[-1] if state.attempts else None
        return {
            "service": state.failure.service,
            "host": state.failure.host,
            "incident_id": state.incident_id,
            "status": state.status,
            "reason": state.reason,
            "fingerprint": state.failure.fingerprint,
            "failure_class": state.failure.failure_class,
            "summary": state.failure.summary,
            # a limit's refusal is an episode, not a heal attempt
            "attempts": len([attempt for attempt in state.attempts if not attempt.refused]),
            "episodes": state.episodes,
            "plan_id": state.plan_id,
            "plan": last.plan.to_dict() if last and last.plan else None,
            "verdicts": [v.to_dict() for v in last.verdicts] if last else [],
            "puts_back": state.failure.puts_back(last.plan) if last and last.plan else [],
            "decision": last.decision.value if last and last.verdicts else None,
            "results": [r.to_dict() for r in last.results] if last else [],
            "artifacts": [path for attempt in state.attempts for path in attempt.artifacts],
            "reads": [{"attempt": attempt.number, **round_.to_dict()} for attempt in state.attempts for round_ in attempt.rounds],
            "path": self.trace.path,
            "approved_by": last.approved_by if last else None,
            # the limit that held the incident back (what it says, until when, the command that lifts it), or None
            "limit": last.held_by.to_dict() if last and last.held_by else None,
            "llm": {"model": self.llm_model, "calls": state.llm_use.calls, "prompt_tokens": state.llm_use.prompt_tokens,
                    "tokens_spent": state.llm_use.budget.spent} if state.llm_use else None,
            "started_at": state.started_at,
            # every attempt as the episode it is in memory (with its id there, None when it was not recorded): what the run's
            # report and audit trail show
            "attempt_log": [state.attempt_records.get(attempt.number)
                            or {**episode_record(state.incident_id, state.failure, attempt, "", state.relapsed_from), "id": None}
                            for attempt in state.attempts],
            "changed": state.changed,
            "warnings": state.warnings,
            # the chain: what it needs that failed too, healed first
            "depends_on": [dependency.to_dict() for dependency in state.dependencies],
            "fleet_incident": state.fleet_incident.to_dict() if state.fleet_incident else None,
            # the episode of the heal this failure relapsed from (the reason says so first), or None
            "relapsed_from": state.relapsed_from,
        }
