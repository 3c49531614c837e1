"""The heal loop for one incident, as an explicit graph of nodes.

    diagnose ─silenced─▶ silenced          (a person's silence or maintenance marker covers it: checked, nothing run, no attempt)
    diagnose ─left_alone─▶ left_alone      (a unit a person masked: nothing runs, no attempt)
    diagnose ─flapping─▶ escalate          (remediated flap_limit times within flap_window: nothing runs, no attempt)
    diagnose ─deadline─▶ escalate          (the incident's deadline passed: no further attempt)
    diagnose ─systemd_restarts─▶ await_systemd ─recovered─▶ recovered   (systemd's Restart= brought it back: nothing ran)
                                               └─failing──▶ diagnose    (with what the unit says now; never awaited twice)
                                               └─unreachable─▶ unreachable
    diagnose ─▶ plan ─planned─▶ guard ─allow──▶ rollout ─proceed─▶ execute ─executed─▶ verify ─healthy/failing─▶ record
                  │ ▲              │ ─approve─▶ ask_human ─approved─▶ rollout
                  │ └── observe ◀─investigate── plan   (the think loop: at most think_rounds rounds per attempt, each of
                  │                up to 4 reads; only what the guard ALLOWs under a read-only rule runs, at once, in one run;
                  │                the rest is refused, never queued for a human, and the planner is told why)
                  │                │              └─pending/denied──────────────────────────────▶ record
                  │                └─block────────────────────────────────────────────────────────▶ record
                  └─escalate──────────────────────────────────────────────────────────────────────▶ record
    record ─healed─▶ healed · ─retry─▶ diagnose · ─escalate─▶ escalate · ─await─▶ await_approval
           ─unreachable─▶ unreachable · ─suspended─▶ suspended · ─halted─▶ halted
    rollout ─halted─▶ record           (more than max_fail_percentage of the run's hosts failed verification: nothing more runs)
    rollout ─deferred─▶ record         (a new plan's canary, its first host in the run, failed it or has not verified it in time)
    rollout ─suspended─▶ record        (the kill switch, thrown while waiting for the canary)
    execute ─suspended─▶ record        (the kill switch: read before the run and polled during it)
    execute ─deferred─▶ record         (the blast radius or the run's attempt budget is spent: no lease) · record ─deferred─▶ deferred
    execute ─in_progress_elsewhere─▶ record   (another run remediates this service on this host now) · ─▶ in_progress_elsewhere
    execute ─deadline─▶ record         (the incident's deadline passed: the run does not start; a run's timeout is what is left)
    verify ─unreachable─▶ record       (the host stopped answering after the run: the attempt is recorded unreachable)
    guard ─check_mode─▶ check_only     (--check: stop before anything runs or is written)
    guard ─observe─▶ observed          (observe mode: what it would run, and why; nothing runs, waits or is written)
    guard ─approve─▶ ask_human         (also every plan in review mode, even one the policy allows)

Every attempt is recorded as one episode; a remediation holds a lease in memory while it runs, so one whose job
died is recorded ``interrupted`` by the next run. Only a verified recovery ends ``healed``. A command
reaches the host only through ``execute``, which runs a plan only when the guard said ALLOW or a
human approved it: at the prompt of ``ask_human``, or later through :func:`run_approved_plan`,
which starts the graph at ``rollout`` with a stored plan that :mod:`approvals` re-validated.
"""

from __future__ import annotations

import dataclasses
import functools
import shlex
import time
import uuid
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Protocol, Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.filters import filtered
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.investigation import (
    MAX_READS_PER_ROUND,
    MAX_ROUNDS,
    NOT_RUN,
    Investigation,
    Read,
    ReadBudget,
    ReadRound,
    Screened,
    Thinking,
    screen,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.llm import TokenBudget
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import Diagnosis, LLMUse, Planner
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.reading import PackageDir, Reading, read_failure
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ExecutorError, FlowError, HostUnreachable, JobGone, MemoryStoreError
from ansible_collections.sentinel.heal.plugins.plugin_utils.flow import DEFAULT_ACTION, Flow, FlowTrace, Node
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard import approvals
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.host_approval import ApprovalSigner
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, Decision, Failure, Plan, Status, StepResult, Verdict
from ansible_collections.sentinel.heal.plugins.plugin_utils.policy import Policy, PolicyContext, evaluate, evaluate_argv, evaluate_plan
from ansible_collections.sentinel.heal.plugins.plugin_utils.runner import HostRequest, RunReport, RunStep, Target
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.leases import BlastRadius, LeaseRefusal, LeaseRequest, process_owner
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory, episode_record
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.rollout import CanaryKey, halted_because

# The ranges of the limits' options (sentinel.heal.controller.limits), for the actions that take them.
LIMIT_OPTION_RANGES = {"flap_limit": (0, 100), "flap_window": (60, 7 * 86400), "max_running": (0, 1000), "max_hosts_per_run": (0, 100_000),
                       "max_attempts_per_run": (0, 1_000_000), "incident_timeout": (30, 86400),
                       "max_fail_percentage": (0, 100), "think_rounds": (0, MAX_ROUNDS)}
MODES = ("observe", "review", "autonomous")
# how often a host that waits for a new plan's canary reads how it went
CANARY_POLL_S = 1.0
CHECK_ONLY_STATUS = {Decision.ALLOW: Status.PLANNED, Decision.APPROVE: Status.AWAITING_APPROVAL, Decision.BLOCK: Status.ESCALATED}


class StillFailing(Exception):
    """Verification saw the service still failing (raised so the verify node retries)."""

    def __init__(self, check: Mapping[str, Any]) -> None:
        super().__init__(check.get("summary", "still failing"))
        self.check = check


class Executor(Protocol):
    """What the loop needs from an executor (RunnerExecutor in production)."""

    step_timeout: int  # seconds each step may run: a remediation's lease expires after all its steps could have run

    def run(self, target: Target, steps: list[RunStep], *, purpose: str, stop: Callable[[], bool] | None = None,
            started: Callable[[str], None] | None = None, timeout: float | None = None) -> RunReport: ...


Verifier = Callable[[Mapping[str, Any]], Mapping[str, Any]]
# Asks a human whether a plan may run: ("approved" | "denied", who), or None when nobody can be asked.
ApprovalPrompt = Callable[[Failure, Plan, Sequence[Verdict]], tuple[str, str] | None]


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
    probe_hosts: frozenset[str] = frozenset()
    # the flapping limit: at most this many remediations of a service on a host within the window (0: no limit)
    flap_limit: int = 3
    flap_window: float = 3600.0
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
    # attempt: what it says, or None
    silence: Callable[[Failure], str | None] = lambda failure: None
    # told each node an incident enters, before it runs (the action shows long work on the terminal)
    progress: Callable[[IncidentState, str], None] = lambda state, node: None
    clock: Callable[[], float] = time.time
    sleep: Callable[[float], None] = time.sleep


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
    # the attempts (by number) that were the canary of their plan in the run
    canaries: dict[int, CanaryKey] = field(default_factory=dict)
    changed: bool = False
    warnings: list[str] = field(default_factory=list)
    timeline: list[dict[str, Any]] = field(default_factory=list)

    @property
    def attempt(self) -> Attempt:
        return self.attempts[-1]

    def log(self, node: str, message: str) -> None:
        self.timeline.append({"at": round(time.time(), 3), "service": self.failure.service, "node": node, "message": message})


def _plan_of(state: IncidentState) -> Plan:
    if state.attempt.plan is None:
        raise FlowError("a node that needs a plan ran before plan", field="plan", value=None)
    return state.attempt.plan


class _ToolNode(Node[IncidentState]):
    node_name = ""

    def __init__(self, tools: Toolkit, **kwargs: Any) -> None:
        super().__init__(sleep=tools.sleep, **kwargs)
        self.tools = tools

    @property
    def name(self) -> str:
        return self.node_name

    def _deadline(self, state: IncidentState) -> float:
        """When the incident's time is up: no attempt starts and no run goes on past it."""
        return state.started_at + self.tools.incident_timeout

    def _held(self, state: IncidentState, outcome: str, reason: str, route: str = "") -> str:
        """End the attempt before its remediation ran: its outcome, why, and the route out (the outcome's by default)."""
        state.attempt.outcome = outcome
        state.reason = reason
        state.log(self.name, reason)
        return route or outcome

    def _suspended(self, state: IncidentState, thrown: str) -> str:
        state.attempt.outcome = "suspended"
        ran = [" ".join(result.argv) for result in state.attempt.results if result.status != "skipped"]
        state.reason = (f"{state.failure.service}: autonomous remediation is {thrown}; "
                        + (f"stopped after {'; '.join(ran)}" if ran else "nothing ran"))
        state.log(self.name, state.reason)
        return "suspended"


@dataclass(frozen=True)
class Suspended:
    """The kill switch was thrown before the remediation started."""

    describe: str


@dataclass(frozen=True)
class Deferred:
    """No lease for this remediation now: the blast radius is spent, or another run remediates the same incident."""

    why: str
    elsewhere: bool = False


@dataclass(frozen=True)
class Late:
    """The incident's deadline passed before the remediation could start."""


@dataclass(frozen=True)
class Evidence:
    """What the read-only evidence commands answered, and where ansible-runner kept that run."""

    results: dict[str, StepResult] = field(default_factory=dict)
    artifacts: str = ""


@dataclass(frozen=True)
class Diagnosing:
    """What one attempt's diagnosis starts from: the failure, the plans not to try again, the deadline, and what the
    steps of the earlier attempts printed (a failed start often says why)."""

    failure: Failure
    excluded: frozenset[tuple[str, ...]]
    deadline: float
    earlier_steps: tuple[StepResult, ...]


class DiagnoseNode(_ToolNode):
    node_name = "diagnose"

    def prep(self, state: IncidentState) -> Diagnosing | str:
        """What to diagnose, or the route of an incident that gets no attempt (its reason set on the state)."""
        failure = state.failure
        route = self._no_attempt(state)
        if route is not None:
            return route
        earlier_steps = tuple(result for attempt in state.attempts for result in attempt.results)
        state.attempts.append(Attempt(number=len(state.attempts) + 1, started_at=self.tools.clock()))
        excluded = set(state.tried)
        memory = self.tools.planner.memory  # read even when nothing may be written (check mode, plan, diagnose)
        if memory is not None:
            excluded |= memory.failed_plans(failure.fingerprint, since=self.tools.clock() - self.tools.failed_plan_ttl)
        return Diagnosing(failure, frozenset(excluded), self._deadline(state), earlier_steps)

    def _no_attempt(self, state: IncidentState) -> str | None:
        """A person's decision (a silence, a masked unit), systemd's own restart not yet waited for, the deadline, or
        too many remediations."""
        failure = state.failure
        silenced = self.tools.silence(failure)
        if silenced is not None:
            state.reason = f"{failure.service}: {silenced}; checked, nothing planned or run"
            marker = failure.facts.get("maintenance")
            if marker and marker.get("problem"):
                state.warnings.append(f"{failure.host}: the maintenance marker {marker.get('path')} {marker['problem']}")
            return "silenced"
        if failure.masked_unit is not None:
            state.reason = f"{failure.service}: {failure.masked_unit} is masked by a person: not healed, nothing run"
            return "left_alone"
        if failure.failure_class == "auto_restart" and not state.awaited_systemd:
            return "systemd_restarts"
        if state.attempts and self.tools.clock() >= self._deadline(state):
            state.reason = _past_deadline(state, self.tools.incident_timeout)
            return "deadline"
        memory = self.tools.planner.memory
        flapping = None if memory is None else flapping_reason(
            memory, failure.host, failure.service, limit=self.tools.flap_limit, window=self.tools.flap_window, now=self.tools.clock())
        if flapping is not None:
            state.reason = flapping
            return "flapping"
        return None

    def exec(self, prep_res: Diagnosing | str) -> tuple[Diagnosis, Evidence, frozenset[tuple[str, ...]]] | str:
        if isinstance(prep_res, str):
            return prep_res
        failure, excluded = prep_res.failure, prep_res.excluded
        context = PolicyContext.from_failure(failure, self.tools.probe_hosts)
        remembered = self.tools.planner.remembered_fix(failure, excluded)
        if remembered is not None:
            reading = read_failure(failure, {}, prep_res.earlier_steps, functools.partial(package_dir, self.tools.policy, context))
            return (Diagnosis(f"{failure.summary} (seen before: {remembered.plan.rationale})", remembered, {}, reading), Evidence(),
                    excluded)
        evidence = self._gather(failure, context, prep_res.deadline)
        outputs = {command: result.output for command, result in evidence.results.items()}
        passed = [command for command, result in evidence.results.items() if result.rc == 0]
        reading = read_failure(failure, outputs, prep_res.earlier_steps, functools.partial(package_dir, self.tools.policy, context), passed)
        return Diagnosis(_diagnosis_text(failure, reading), None, outputs, reading), evidence, excluded

    def _gather(self, failure: Failure, context: PolicyContext, deadline: float) -> Evidence:
        """Run the read-only evidence commands of the candidate runbooks that the policy ALLOWs."""
        verdicts = {command: evaluate(command, context, self.tools.policy) for command in self.tools.planner.evidence_commands(failure)}
        allowed = {command: verdict for command, verdict in verdicts.items() if verdict.decision is Decision.ALLOW}
        run_evidence = not self.tools.check_mode if self.tools.run_evidence is None else self.tools.run_evidence
        if not allowed or not run_evidence:
            return Evidence()
        # what the check already read for the service (evidence_ahead), with the privilege the guard gives it now
        read = {(tuple(answer["argv"]), bool(answer.get("become"))): answer for answer in failure.evidence.get("commands") or []}
        results = {command: StepResult.from_evidence(verdict.argv, read[(verdict.argv, verdict.become)])
                   for command, verdict in allowed.items() if (verdict.argv, verdict.become) in read}
        unread = {command: verdict for command, verdict in allowed.items() if command not in results}
        artifacts = ""
        if unread:
            steps = [read_step(failure.service, verdict) for verdict in unread.values()]
            reader = self.tools.evidence_executor or self.tools.executor
            report = reader.run(self.tools.target, steps, purpose="evidence", timeout=deadline - self.tools.clock())
            results.update(zip(unread, report.results, strict=True))
            artifacts = report.artifacts
        return Evidence({command: results[command] for command in allowed}, artifacts)

    def exec_fallback(self, prep_res: Diagnosing, exc: Exception) -> Any:
        if isinstance(exc, ExecutorError):
            failure = prep_res.failure
            reading = read_failure(failure, {}, prep_res.earlier_steps)
            return (Diagnosis(f"{failure.summary} (evidence commands could not run: {exc})", None, {}, reading), Evidence(),
                    prep_res.excluded)
        raise exc

    def post(self, state: IncidentState, prep_res: Any, exec_res: tuple[Diagnosis, Evidence, frozenset[tuple[str, ...]]] | str) -> str:
        if isinstance(exec_res, str):
            return exec_res
        diagnosis, evidence, excluded = exec_res
        results = evidence.results
        attempt = state.attempt
        attempt.diagnosis = diagnosis.text
        attempt.evidence_results = results
        if evidence.artifacts:
            attempt.artifacts.append(evidence.artifacts)
        state.diagnosis = diagnosis
        state.excluded = excluded
        if results:
            state.log(self.name, "evidence: " + "; ".join(f"{cmd} -> rc={r.rc}" for cmd, r in results.items()))
        if diagnosis.reading.decisive is not None:
            state.log(self.name, f"read as {diagnosis.reading.decisive.kind}: {diagnosis.reading.describe()}")
        state.log(self.name, f"attempt {attempt.number}: {diagnosis.text}")
        return DEFAULT_ACTION


class AwaitSystemdNode(_ToolNode):
    """The unit is down and systemd restarts it by itself (Restart=): wait its RestartSec plus a grace, checking
    as it goes, and run nothing. Restarting it too would fight systemd (and count against its start limit)."""

    node_name = "await_systemd"

    def prep(self, state: IncidentState) -> tuple[Mapping[str, Any], float]:
        state.awaited_systemd = True
        unit = state.failure.evidence.get("unit") or {}
        remaining = unit.get("restart_in_s")
        delay = float(unit.get("restart_delay_s") or 0.0 if remaining is None else remaining)
        state.log(self.name, f"systemd restarts {state.failure.unit} by itself in {delay:g} s (Restart={unit.get('Restart')}): "
                             "waiting, running nothing")
        return state.failure.spec, delay

    def exec(self, prep_res: tuple[Mapping[str, Any], float]) -> Mapping[str, Any] | HostUnreachable:
        spec, delay = prep_res
        self.tools.sleep(delay)
        deadline = self.tools.clock() + self.tools.systemd_restart_grace
        while True:
            try:
                check = self.tools.verify(spec)
            except HostUnreachable as exc:
                return exc
            if check.get("healthy") or self.tools.clock() >= deadline:
                return check
            self.tools.sleep(self.tools.verify_wait)

    def post(self, state: IncidentState, prep_res: Any, exec_res: Mapping[str, Any] | HostUnreachable) -> str:
        if isinstance(exec_res, HostUnreachable):
            state.reason = f"{state.failure.service}: the host stopped answering while systemd restarted {state.failure.unit}: {exec_res}"
            return "unreachable"
        if exec_res.get("healthy"):
            state.reason = f"{state.failure.service}: systemd's own Restart= brought {state.failure.unit} back; nothing ran"
            return "recovered"
        state.failure = Failure.from_check(state.failure.host, exec_res, state.failure.facts)
        state.log(self.name, f"not back after systemd's restart: {state.failure.failure_class}: {state.failure.summary}")
        return "failing"


class PlanNode(_ToolNode):
    node_name = "plan"

    def prep(self, state: IncidentState) -> tuple[Failure, Diagnosis, frozenset[tuple[str, ...]], LLMUse | None, Thinking, float]:
        if state.diagnosis is None:
            raise FlowError("plan ran before diagnose", field="diagnosis", value=None)
        if state.llm_use is not None:
            state.llm_use.fallback = None
        rounds = tuple(state.attempt.rounds)
        thinking = Thinking(rounds, max(self.tools.think_rounds - len(rounds), 0))
        return state.failure, state.diagnosis, state.excluded, state.llm_use, thinking, self._deadline(state) - self.tools.clock()

    def exec(self, prep_res: tuple[Failure, Diagnosis, frozenset[tuple[str, ...]], LLMUse | None, Thinking, float]) -> Plan | Investigation:
        return self.tools.planner.plan(*prep_res)

    def post(self, state: IncidentState, prep_res: Any, exec_res: Plan | Investigation) -> str:
        if state.llm_use is not None and state.llm_use.fallback:
            state.log(self.name, f"LLM not used: {state.llm_use.fallback}; falling back to the offline planner")
        if isinstance(exec_res, Investigation):
            state.investigation = exec_res
            asked = "; ".join(request.command + (f" ({request.why})" if request.why else "") for request in exec_res.requests)
            state.log(self.name, f"{exec_res.source.value} {exec_res.reference} asks to look first "
                                 f"(round {len(state.attempt.rounds) + 1} of {self.tools.think_rounds}): {asked}")
            return "investigate"
        plan = exec_res
        state.attempt.plan = plan
        if plan.escalation:
            state.attempt.outcome = "escalated"
            state.reason = plan.escalation
            state.log(self.name, f"{plan.source.value} {plan.reference}: escalate: {plan.escalation}")
            return "escalate"
        state.tried.add(plan.templates)
        commands = "; ".join(step.command for step in plan.steps)
        state.log(self.name, f"plan from {plan.source.value} ({plan.reference}): {commands}")
        return "planned"


@dataclass(frozen=True)
class Looking:
    """What the observe node reads: the requests as the guard judged them, and how long the run may take."""

    investigation: Investigation
    screened: list[Screened]
    time_left: float
    service: str


class ObserveNode(_ToolNode):
    """The think loop's reads: each request judged by the guard in the incident's context; the allowed reads (rules
    marked read_only) of the round run at once, in one ansible-runner run; nothing else runs or waits for anyone."""

    node_name = "observe"

    def prep(self, state: IncidentState) -> Looking:
        investigation = state.investigation
        if investigation is None:
            raise FlowError("observe ran without reads to make", field="investigation", value=None)
        policy = self.tools.policy
        context = PolicyContext.from_failure(state.failure, self.tools.probe_hosts)
        requests = investigation.requests
        verdicts = [evaluate_argv(request.argv, context, policy) if index < MAX_READS_PER_ROUND else None
                    for index, request in enumerate(requests)]
        diagnosis = state.diagnosis
        read_before = frozenset(diagnosis.outputs if diagnosis else ()) | Thinking(tuple(state.attempt.rounds)).read_commands
        time_left = self._deadline(state) - self.tools.clock()
        screened = screen(requests, verdicts, reads_only=policy.read_only_rules, read_before=read_before,
                          check_mode=self.tools.check_mode, late=time_left <= 0, budget_left=state.read_budget.left)
        return Looking(investigation, screened, time_left, state.failure.service)

    def exec(self, prep_res: Looking) -> RunReport | None:
        steps = [read_step(prep_res.service, item.verdict) for item in prep_res.screened if item.run and item.verdict is not None]
        if not steps:
            return None
        return self.tools.executor.run(self.tools.target, steps, purpose="investigate", timeout=prep_res.time_left)

    def exec_fallback(self, prep_res: Looking, exc: Exception) -> ExecutorError:
        if isinstance(exc, ExecutorError):
            return exc
        raise exc

    def post(self, state: IncidentState, prep_res: Looking, exec_res: RunReport | ExecutorError | None) -> str:
        results = iter(exec_res.results if isinstance(exec_res, RunReport) else ())
        reads = []
        for item in prep_res.screened:
            verdict = item.verdict
            decision, rule = (verdict.decision, verdict.rule) if verdict else (Decision.BLOCK, "think-loop")
            if not item.run:
                reads.append(Read(item.request, item.outcome, decision, rule, item.reason))
            elif isinstance(exec_res, ExecutorError):
                reads.append(Read(item.request, NOT_RUN, decision, rule, str(exec_res)))
            else:
                result = next(results)
                reads.append(Read(item.request, item.outcome, decision, rule, item.reason, rc=result.rc,
                                  output=state.read_budget.take(result.output)))
        round_ = ReadRound(number=len(state.attempt.rounds) + 1, investigation=prep_res.investigation, reads=tuple(reads),
                           artifacts=exec_res.artifacts if isinstance(exec_res, RunReport) else "")
        state.attempt.rounds.append(round_)
        state.investigation = None
        if round_.artifacts:
            state.attempt.artifacts.append(round_.artifacts)
        for read in reads:
            state.log(self.name, read.describe())
        ran = {read.request.command: read.output for read in reads if read.ran}
        if ran and state.diagnosis is not None:
            state.diagnosis = _with_reads(state, self.tools, state.diagnosis, ran)
            if state.diagnosis.reading.decisive is not None:
                state.log(self.name, f"read as {state.diagnosis.reading.decisive.kind}: {state.diagnosis.reading.describe()}")
        return DEFAULT_ACTION


def _with_reads(state: IncidentState, tools: Toolkit, diagnosis: Diagnosis, outputs: Mapping[str, str]) -> Diagnosis:
    """The diagnosis with what the reads printed among its outputs, read again."""
    merged = {**diagnosis.outputs, **outputs}
    context = PolicyContext.from_failure(state.failure, tools.probe_hosts)
    earlier_steps = tuple(result for attempt in state.attempts[:-1] for result in attempt.results)
    reading = read_failure(state.failure, merged, earlier_steps, functools.partial(package_dir, tools.policy, context))
    return dataclasses.replace(diagnosis, outputs=merged, reading=reading)


class GuardNode(_ToolNode):
    node_name = "guard"

    def prep(self, state: IncidentState) -> tuple[Plan, PolicyContext]:
        return _plan_of(state), PolicyContext.from_failure(state.failure, self.tools.probe_hosts)

    def exec(self, prep_res: tuple[Plan, PolicyContext]) -> list[Any]:
        plan, context = prep_res
        verdicts, _decision = evaluate_plan([step.argv for step in plan.steps], context, self.tools.policy)
        return verdicts

    def post(self, state: IncidentState, prep_res: Any, exec_res: list[Any]) -> str:
        attempt = state.attempt
        attempt.verdicts = exec_res
        attempt.policy_version = self.tools.policy.version
        decision = attempt.decision
        for verdict in exec_res:
            state.log(self.name, f"{verdict.decision.value}: {verdict.command} ({verdict.rule}: {verdict.reason})")
        if self.tools.check_mode:
            return "check_mode"
        mode = state.failure.spec.get("mode") or self.tools.mode
        if mode == "observe":
            commands = "; ".join(verdict.command for verdict in exec_res)
            plan = _plan_of(state)
            state.reason = (f"{state.failure.service}: observe mode, nothing ran and nothing waits: the plan from {plan.source.value} "
                            f"{plan.reference} would be {decision.value}: {commands}")
            return "observe"
        if decision is Decision.BLOCK:
            attempt.outcome = "blocked"
            blocked = [v for v in exec_res if v.decision is Decision.BLOCK]
            state.reason = "the guard blocked the plan: " + "; ".join(f"{v.command!r}: {v.reason}" for v in blocked)
            return "block"
        if decision is Decision.APPROVE:
            pending = [v for v in exec_res if v.decision is Decision.APPROVE]
            state.reason = "a human must approve: " + "; ".join(f"{v.command!r}: {v.reason}" for v in pending)
            return "approve"
        if mode == "review":
            state.reason = "review mode: a human approves every plan, even one the policy allows"
            return "approve"
        return "allow"


class AskHumanNode(_ToolNode):
    """Asks the operator at the terminal, when there is one; otherwise the plan waits, stored."""

    node_name = "ask_human"

    def prep(self, state: IncidentState) -> tuple[Failure, Plan, list[Verdict]]:
        return state.failure, _plan_of(state), state.attempt.verdicts

    def exec(self, prep_res: tuple[Failure, Plan, list[Verdict]]) -> tuple[str, str] | None:
        return self.tools.ask_approval(*prep_res) if self.tools.ask_approval else None

    def post(self, state: IncidentState, prep_res: Any, exec_res: tuple[str, str] | None) -> str:
        attempt = state.attempt
        if exec_res is None:
            attempt.outcome = "awaiting_approval"
            state.log(self.name, "nobody to ask here: the plan waits for approval")
            return "pending"
        answer, who = exec_res
        if answer == "approved":
            attempt.approved_by = who
            state.log(self.name, f"approved by {who}")
            return "approved"
        attempt.outcome = "denied"
        state.reason = f"{who} denied the plan ({state.reason})"
        state.log(self.name, f"denied by {who}")
        return "denied"


@dataclass(frozen=True)
class Rollout:
    """What the rollout node asks of the run: the canary the plan needs (None for a plan verified before), and until
    when this host may wait for it."""

    canary: CanaryKey | None
    deadline: float


@dataclass(frozen=True)
class Proceed:
    """The remediation may run here: as its plan's canary, after the canary verified it on ``proven_on``, or as a plan
    that needs none."""

    canary: CanaryKey | None = None
    proven_on: str = ""
    waited: float = 0.0


@dataclass(frozen=True)
class Halted:
    """The run's error threshold was passed: nothing more is attempted in it."""

    why: str


class RolloutNode(_ToolNode):
    """Whether this remediation may run now in this run: not once the run's error threshold was passed, and a new plan
    only on its canary, or after its canary verified it."""

    node_name = "rollout"

    def prep(self, state: IncidentState) -> Rollout:
        key = CanaryKey.of(self.tools.blast_radius.run_id, state.failure, _plan_of(state)) if self.tools.memory is not None else None
        return Rollout(key, self._deadline(state))

    def exec(self, prep_res: Rollout) -> Proceed | Halted | Deferred | Suspended:
        memory, radius, host = self.tools.memory, self.tools.blast_radius, self.tools.target.name
        if memory is None:
            return Proceed()
        halted = halted_because(memory.failed_hosts(radius.run_id), run_hosts=radius.run_hosts, max_fail_percentage=radius.max_fail_percentage)
        if halted is not None:
            return Halted(halted)
        key = prep_res.canary
        if key is None:
            return Proceed()
        began = self.tools.clock()
        while True:
            canary = memory.claim_canary(key, host=host, owner=process_owner(), at=self.tools.clock())
            waited = self.tools.clock() - began
            if canary.host == host:
                return Proceed(canary=key, waited=waited)
            if canary.outcome == "verified":
                return Proceed(proven_on=canary.host, waited=waited)
            if canary.outcome == "failed":
                return Deferred(f"this new plan failed verification on {canary.host}, the first host to try it in this run; "
                                "it runs on no other host")
            thrown = self.tools.suspension()
            if thrown is not None:
                return Suspended(thrown)
            if self.tools.clock() + CANARY_POLL_S >= prep_res.deadline:
                return Deferred(f"this new plan is tried on {canary.host} first, and had not verified there before the incident's "
                                f"deadline ({waited:.0f} s waited)")
            self.tools.sleep(CANARY_POLL_S)

    def post(self, state: IncidentState, prep_res: Rollout, exec_res: Proceed | Halted | Deferred | Suspended) -> str:
        service = state.failure.service
        if isinstance(exec_res, Suspended):
            return self._suspended(state, exec_res.describe)
        if isinstance(exec_res, Halted):
            return self._held(state, "halted", f"{service}: {exec_res.why}")
        if isinstance(exec_res, Deferred):
            return self._held(state, "deferred", f"{service}: deferred, nothing ran: {exec_res.why}")
        if exec_res.canary is not None:
            state.canaries[state.attempt.number] = exec_res.canary
            state.log(self.name, f"a new plan: tried here first, the canary of this run ({exec_res.waited:.0f} s waited)")
        elif exec_res.proven_on:
            state.log(self.name, f"a new plan, verified on {exec_res.proven_on} first in this run ({exec_res.waited:.0f} s waited)")
        return "proceed"


def read_step(service: str, verdict: Verdict) -> RunStep:
    """A read-only command the guard allowed, as a step: for the executor on the host, a plan of one read."""
    return RunStep(argv=verdict.argv, become=verdict.become, may_fail=True,
                   on_host=HostRequest(service, verdict.policy_version, (verdict.argv,), 0, kind="read"))


@dataclass(frozen=True)
class Remediation:
    """What execute runs: the guarded steps, the lease it asks for (None without memory), and how long the run may take
    before the incident's deadline."""

    steps: list[RunStep]
    lease: LeaseRequest | None
    time_left: float


class ExecuteNode(_ToolNode):
    node_name = "execute"

    def prep(self, state: IncidentState) -> Remediation:
        plan = _plan_of(state)
        decision = state.attempt.decision
        if not (decision is Decision.ALLOW or (decision is Decision.APPROVE and state.attempt.approved_by)):
            raise FlowError("execute reached without ALLOW or a human's approval", field="decision", value=decision.value)
        judged = tuple(verdict.argv for verdict in state.attempt.verdicts)
        approval = None
        if decision is Decision.APPROVE and self.tools.approval_signer is not None:
            approval = self.tools.approval_signer.sign(self.tools.target.name, state.failure.service, judged,
                                                       nonce=state.approved_plan_id or f"{state.incident_id}-{state.attempt.number}",
                                                       now=self.tools.clock())
        steps = [
            RunStep(argv=verdict.argv, become=verdict.become, may_fail=step.may_fail,
                    on_host=HostRequest(state.failure.service, verdict.policy_version, judged, index, approval=approval))
            for index, (step, verdict) in enumerate(zip(plan.steps, state.attempt.verdicts, strict=True))
        ]
        now = self.tools.clock()
        lease = None
        if self.tools.memory is not None:
            lease = LeaseRequest(
                radius=self.tools.blast_radius, incident_id=state.incident_id, failure=state.failure, attempt=state.attempt, at=now,
                # past it, a crashed job's slot is free again
                ttl=self.tools.executor.step_timeout * len(steps) + 60, owner=process_owner(), executed_plan_id=state.approved_plan_id,
            )
        return Remediation(steps, lease, self._deadline(state) - now)

    def exec(self, prep_res: Remediation) -> RunReport | HostUnreachable | Suspended | Deferred | Late:
        thrown = self.tools.suspension()
        if thrown is not None:
            return Suspended(thrown)
        if prep_res.time_left < 1:
            return Late()
        memory, lease = self.tools.memory, None
        if memory is not None and prep_res.lease is not None:
            granted = memory.acquire_lease(prep_res.lease)
            if isinstance(granted, LeaseRefusal):
                return Deferred(granted.why, elsewhere=granted.elsewhere)
            lease = granted
        keep_lease = False
        try:
            return self.tools.executor.run(
                self.tools.target, prep_res.steps, purpose="remediation", stop=lambda: self.tools.suspension() is not None,
                started=None if memory is None or lease is None else functools.partial(memory.lease_run, lease), timeout=prep_res.time_left,
            )
        except HostUnreachable as exc:
            return exc
        except JobGone:
            keep_lease = True  # the next run records this remediation as interrupted
            raise
        finally:
            if memory is not None and lease is not None and not keep_lease:
                memory.release_lease(lease)

    def exec_fallback(self, prep_res: Remediation, exc: Exception) -> Any:
        if isinstance(exc, ExecutorError):
            return exc
        raise exc

    def post(self, state: IncidentState, prep_res: Remediation, exec_res: RunReport | ExecutorError | Suspended | Deferred | Late) -> str:
        attempt = state.attempt
        if isinstance(exec_res, Suspended):
            return self._suspended(state, exec_res.describe)
        if isinstance(exec_res, Late):
            return self._held(state, "escalated", _past_deadline(state, self.tools.incident_timeout), route="deadline")
        if isinstance(exec_res, Deferred) and exec_res.elsewhere:
            return self._held(state, "in_progress_elsewhere", f"{state.failure.service}: in progress elsewhere, nothing ran here: {exec_res.why}")
        if isinstance(exec_res, Deferred):
            return self._held(state, "deferred", f"{state.failure.service}: deferred, nothing ran: {exec_res.why}; the next run takes it up")
        if isinstance(exec_res, HostUnreachable):
            attempt.outcome = "unreachable"
            state.reason = str(exec_res)
            state.log(self.name, f"unreachable: {exec_res}")
            return "unreachable"
        state.changed = True
        if isinstance(exec_res, ExecutorError):
            if exec_res.field == "artifacts":  # the run started and left its directory behind
                attempt.artifacts.append(str(exec_res.value))
            attempt.results = [StepResult(argv=step.argv, status="skipped", stderr=str(exec_res)) for step in prep_res.steps]
            state.log(self.name, f"the run failed: {exec_res}")
            return "executed"
        plan = _plan_of(state)
        filters = [step.output_filters for step in plan.steps]
        attempt.results = [filtered(result, filters[index]) if index < len(filters) else result for index, result in enumerate(exec_res.results)]
        attempt.artifacts.append(exec_res.artifacts)
        for result in exec_res.results:
            state.log(self.name, f"{result.status} rc={result.rc}: {' '.join(result.argv)}")
        refused = [result for result in exec_res.results if result.status == "refused"]
        if refused:
            # the host's own judge said no: like the guard's BLOCK, a person looks, nothing is retried
            attempt.outcome = "blocked"
            state.reason = "the host refused the plan: " + "; ".join(f"{shlex.join(result.argv)!r}: {result.stderr}" for result in refused)
            return "refused"
        if exec_res.stopped:
            return self._suspended(state, self.tools.suspension() or "the kill switch was thrown during the run")
        return "executed"


class VerifyNode(_ToolNode):
    node_name = "verify"

    def __init__(self, tools: Toolkit) -> None:
        super().__init__(tools, max_retries=tools.verify_retries, wait=tools.verify_wait)

    def prep(self, state: IncidentState) -> Mapping[str, Any]:
        return state.failure.spec

    def exec(self, prep_res: Mapping[str, Any]) -> Mapping[str, Any] | HostUnreachable:
        try:
            check = self.tools.verify(prep_res)
        except HostUnreachable as exc:
            return exc  # not retried: each try would wait out the connection's timeout again
        if not check.get("healthy"):
            raise StillFailing(check)
        return check

    def exec_fallback(self, prep_res: Mapping[str, Any], exc: Exception) -> Mapping[str, Any]:
        if isinstance(exc, StillFailing):
            return exc.check
        raise exc

    def post(self, state: IncidentState, prep_res: Any, exec_res: Mapping[str, Any] | HostUnreachable) -> str:
        attempt = state.attempt
        if isinstance(exec_res, HostUnreachable):
            attempt.outcome = "unreachable"
            attempt.verification = {"healthy": False, "summary": f"not verified: {exec_res}"}
            state.reason = f"{state.failure.service}: the host stopped answering after the remediation ran; not verified: {exec_res}"
            state.log(self.name, state.reason)
            return "unreachable"
        attempt.verified = bool(exec_res.get("healthy"))
        attempt.verification = {"healthy": attempt.verified, "summary": exec_res.get("summary", ""), "checks": exec_res.get("checks", [])}
        attempt.outcome = "healed" if attempt.verified else "failed"
        if attempt.verified:
            state.log(self.name, "healthy: every check passes")
            return "healthy"
        state.reason = f"still failing after attempt {attempt.number}: {exec_res.get('summary', '')}"
        state.log(self.name, state.reason)
        if exec_res.get("failure_class") and exec_res.get("evidence"):
            # the next attempt diagnoses what the service says now (its journal since the failed start included)
            state.failure = Failure.from_check(state.failure.host, exec_res, state.failure.facts)
        return "failing"


class RecordNode(_ToolNode):
    node_name = "record"

    def __init__(self, tools: Toolkit) -> None:
        super().__init__(tools, max_retries=3, wait=0.5)

    def prep(self, state: IncidentState) -> tuple[IncidentState, Attempt]:
        state.attempt.finished_at = self.tools.clock()
        # the failure as this attempt saw it: verification may replace it with what the service says next
        state.attempt_records[state.attempt.number] = {
            **episode_record(state.incident_id, state.failure, state.attempt, self.tools.blast_radius.run_id), "id": None}
        return state, state.attempt

    def exec(self, prep_res: tuple[IncidentState, Attempt]) -> tuple[int, str | None] | None:
        state, attempt = prep_res
        if self.tools.memory is None:
            return None
        pending = None
        if attempt.outcome == "awaiting_approval":
            pending = approvals.pending_plan(_plan_of(state), state.failure, self.tools.policy, ttl_s=self.tools.approval_ttl)
        return self.tools.memory.record_attempt(
            incident_id=state.incident_id, failure=state.failure, attempt=attempt, pending=pending,
            executed_plan_id=state.approved_plan_id, run_id=self.tools.blast_radius.run_id, canary=state.canaries.get(attempt.number),
        )

    def exec_fallback(self, prep_res: tuple[IncidentState, Attempt], exc: Exception) -> MemoryStoreError:
        if isinstance(exc, MemoryStoreError):
            return exc
        raise exc

    def post(self, state: IncidentState, prep_res: Any, exec_res: tuple[int, str | None] | MemoryStoreError | None) -> str:
        attempt = state.attempt
        if isinstance(exec_res, MemoryStoreError):
            state.warnings.append(f"episode of attempt {attempt.number} not recorded: {exec_res}")
        elif exec_res is not None:
            episode_id, plan_id = exec_res
            state.episodes.append(episode_id)
            state.attempt_records[attempt.number]["id"] = episode_id
            state.plan_id = plan_id or state.plan_id
            state.log(self.name, f"episode {episode_id}: {attempt.outcome}")
        if attempt.outcome == "healed":
            return "healed"
        if attempt.outcome == "awaiting_approval":
            return "await"
        if attempt.outcome in ("unreachable", "suspended", "deferred", "in_progress_elsewhere", "halted"):
            return attempt.outcome
        if attempt.outcome == "failed" and len(state.attempts) < self.tools.max_attempts:
            return "retry"
        if attempt.outcome == "failed":
            state.reason = f"{state.failure.service}: not healed by attempt {attempt.number}, the last allowed; {state.reason}"
        return "escalate"


class _EndNode(_ToolNode):
    status = ""

    def post(self, state: IncidentState, prep_res: Any, exec_res: Any) -> str:
        state.status = self.status
        state.log(self.name, self.status + (f": {state.reason}" if state.reason and self.status != Status.HEALED.value else ""))
        return DEFAULT_ACTION


class HealedNode(_EndNode):
    node_name = "healed"
    status = Status.HEALED.value


class EscalateNode(_EndNode):
    node_name = "escalate"
    status = Status.ESCALATED.value


class AwaitApprovalNode(_EndNode):
    node_name = "await_approval"
    status = Status.AWAITING_APPROVAL.value


class UnreachableNode(_EndNode):
    node_name = "unreachable"
    status = Status.UNREACHABLE.value


class DeferredNode(_EndNode):
    """The blast radius was spent: the remediation waits for the next run."""

    node_name = "deferred"
    status = Status.DEFERRED.value


class HaltedNode(_EndNode):
    """The run's error threshold was passed: nothing more is attempted in this run."""

    node_name = "halted"
    status = Status.HALTED.value


class InProgressElsewhereNode(_EndNode):
    """Another run (a sweep, an EDA event, an AWX retry) is remediating this service on this host right now."""

    node_name = "in_progress_elsewhere"
    status = Status.IN_PROGRESS_ELSEWHERE.value


class SuspendedNode(_EndNode):
    """The kill switch was thrown: the remediation did not start (or stopped between steps)."""

    node_name = "suspended"
    status = Status.SUSPENDED.value


class RecoveredNode(_EndNode):
    """systemd's own Restart= brought the service back while the loop waited: nothing ran, no attempt."""

    node_name = "recovered"
    status = Status.RECOVERED.value


class SilencedNode(_EndNode):
    """A person silenced the host or service (sentinel.heal.memory operation=silence): checked, nothing else."""

    node_name = "silenced"
    status = Status.SILENCED.value


class LeftAloneNode(_EndNode):
    """A person decided the service must not run (a masked unit): the loop does nothing, not even an attempt."""

    node_name = "left_alone"
    status = Status.MASKED.value


class ObservedNode(_EndNode):
    """Observe mode: checked, diagnosed and planned; nothing ran, nothing waits, nothing was written."""

    node_name = "observed"
    status = Status.OBSERVED.value


class CheckOnlyNode(_ToolNode):
    node_name = "check_only"

    def post(self, state: IncidentState, prep_res: Any, exec_res: Any) -> str:
        state.status = CHECK_ONLY_STATUS[state.attempt.decision].value
        state.log(self.name, f"check mode: nothing ran; the plan would be {state.attempt.decision.value}")
        return DEFAULT_ACTION


EDGES: Mapping[str, Mapping[str, str]] = {
    "diagnose": {DEFAULT_ACTION: "plan", "left_alone": "left_alone", "systemd_restarts": "await_systemd", "flapping": "escalate",
                 "deadline": "escalate", "silenced": "silenced"},
    "await_systemd": {"recovered": "recovered", "failing": "diagnose", "unreachable": "unreachable"},
    "plan": {"planned": "guard", "escalate": "record", "investigate": "observe"},
    "observe": {DEFAULT_ACTION: "plan"},
    "guard": {"allow": "rollout", "approve": "ask_human", "block": "record", "check_mode": "check_only", "observe": "observed"},
    "ask_human": {"approved": "rollout", "pending": "record", "denied": "record"},
    "rollout": {"proceed": "execute", "halted": "record", "deferred": "record", "suspended": "record"},
    "execute": {"executed": "verify", "refused": "record", "unreachable": "record", "suspended": "record", "deferred": "record", "deadline": "record",
                "in_progress_elsewhere": "record"},
    "verify": {"healthy": "record", "failing": "record", "unreachable": "record"},
    "record": {"healed": "healed", "retry": "diagnose", "escalate": "escalate", "await": "await_approval", "unreachable": "unreachable",
               "suspended": "suspended", "deferred": "deferred", "in_progress_elsewhere": "in_progress_elsewhere", "halted": "halted"},
}


def _diagnosis_text(failure: Failure, reading: Reading) -> str:
    decisive = reading.decisive
    return failure.summary if decisive is None else f"{failure.summary}; read as {decisive.kind}: {reading.describe()}"


def evidence_ahead(services: Sequence[Mapping[str, Any]], planner: Planner, policy: Policy, host: str,
                   held: Callable[[str], str | None] = lambda service: None) -> list[dict[str, Any]]:
    """The evidence commands of each declared service's runbooks that the policy ALLOWs for it, for service_check to
    run in the check itself when the service fails (``evidence_commands``): a failing service's evidence then costs
    no second call. Diagnosis judges them again in the incident's context and reads again what it does not find.
    None for a service ``held`` says why the loop would not diagnose now (the kill switch, a silence, a window, the
    flapping limit): what it reads is read only once the loop may act (a configuration test is not free of effects:
    ``nginx -t`` leaves an empty pid file where none was)."""
    ahead = []
    for spec in services:
        if held(str(spec["name"])) is not None:
            continue
        service = Failure(host=host, service=str(spec["name"]), failure_class="", summary="", evidence={}, spec=spec)
        context = PolicyContext.from_failure(service)
        for command in planner.evidence_commands_ahead(service):
            verdict = evaluate(command, context, policy)
            if verdict.decision is Decision.ALLOW:
                ahead.append({"service": service.service, "argv": list(verdict.argv), "become": verdict.become})
    return ahead


def package_dir(policy: Policy, context: PolicyContext, path: str) -> PackageDir | None:
    """The directory the incident's service's package made that ``path`` is, or is in, with the owner, group and mode
    the package gave it; None when the path lies outside the service's own directories."""
    canonical = policy.paths.canonical(path)
    while canonical and canonical != "/":
        located = policy.package_path(canonical, context)
        if located is not None:
            top, entry = located
            return PackageDir(path=top, owner=entry.owner, group=entry.group, mode=f"{entry.mode:04o}", tree=entry.tree)
        canonical = canonical.rsplit("/", 1)[0] or "/"
    return None


def _past_deadline(state: IncidentState, timeout: float) -> str:
    ran = len([attempt for attempt in state.attempts if attempt.results])
    return (f"{state.failure.service}: the incident's deadline ({timeout:g} s) passed after {ran} remediation attempt(s); "
            f"nothing more runs in this job; last: {state.failure.summary}")


def flapping_reason(memory: Memory, host: str, service: str, *, limit: int, window: float, now: float) -> str | None:
    """Why the service may not be remediated now: it was, ``limit`` times within ``window`` seconds (counted in memory,
    across jobs); None when it may (or the limit is off)."""
    if limit <= 0:
        return None
    recent = memory.remediations(host, service, since=now - window)
    if len(recent) < limit:
        return None
    until = time.strftime("%H:%M:%S", time.localtime(recent[-limit]["started_at"] + window))
    return (f"{service}: flapping: remediated {len(recent)} times in the last {window / 60:g} min (episodes "
            f"{', '.join(str(row['id']) for row in recent)}; the limit is {limit}); nothing runs until {until} or until a person "
            f"resets it (sentinel.heal.memory operation=reset_flapping host={host} service={service})")


def build_flow(tools: Toolkit, start: str = "diagnose") -> Flow[IncidentState]:
    node_types: list[type[_ToolNode]] = [
        DiagnoseNode, AwaitSystemdNode, PlanNode, ObserveNode, GuardNode, AskHumanNode, RolloutNode, ExecuteNode, VerifyNode, RecordNode,
        HealedNode, EscalateNode, AwaitApprovalNode, UnreachableNode, SuspendedNode, DeferredNode, InProgressElsewhereNode, HaltedNode,
        RecoveredNode,
        SilencedNode, LeftAloneNode,
        ObservedNode, CheckOnlyNode,
    ]
    nodes = {node_type.node_name: node_type(tools) for node_type in node_types}
    return Flow(start=start, nodes=nodes, edges=EDGES, entering=lambda node, state: tools.progress(state, node))


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
            "attempts": len(state.attempts),
            "episodes": state.episodes,
            "plan_id": state.plan_id,
            "plan": last.plan.to_dict() if last and last.plan else None,
            "verdicts": [v.to_dict() for v in last.verdicts] if last else [],
            "decision": last.decision.value if last and last.verdicts else None,
            "results": [r.to_dict() for r in last.results] if last else [],
            "artifacts": [path for attempt in state.attempts for path in attempt.artifacts],
            "reads": [{"attempt": attempt.number, **round_.to_dict()} for attempt in state.attempts for round_ in attempt.rounds],
            "path": self.trace.path,
            "approved_by": last.approved_by if last else None,
            "llm": {"model": self.llm_model, "calls": state.llm_use.calls, "prompt_tokens": state.llm_use.prompt_tokens,
                    "tokens_spent": state.llm_use.budget.spent} if state.llm_use else None,
            "started_at": state.started_at,
            # every attempt as the episode it is in memory (with its id there, None when it was not recorded): what the run's
            # report and audit trail show
            "attempt_log": [state.attempt_records.get(attempt.number) or {**episode_record(state.incident_id, state.failure, attempt, ""), "id": None}
                            for attempt in state.attempts],
            "changed": state.changed,
            "warnings": state.warnings,
        }


def heal_incident(failure: Failure, tools: Toolkit) -> IncidentOutcome:
    llm = tools.planner.llm
    state = IncidentState(failure=failure, started_at=tools.clock(), llm_use=LLMUse(TokenBudget(llm.settings.token_budget)) if llm else None)
    state.log("start", f"{failure.failure_class}: {failure.summary}")
    trace = build_flow(tools).run(state)
    return IncidentOutcome(state=state, trace=trace, llm_model=llm.settings.model if llm else "")


def diagnose_incident(failure: Failure, tools: Toolkit) -> IncidentState:
    """Only the first node: what memory, the runbooks and the evidence commands say, before any plan."""
    state = IncidentState(failure=failure)
    DiagnoseNode(tools).run(state)
    return state


def run_approved_plan(stored: approvals.StoredPlan, verdicts: list[Verdict], approved_by: str, tools: Toolkit) -> IncidentOutcome:
    """Carry out a stored plan a human approved: execute, verify, record; no new plan if it fails.

    The caller has re-validated it (:func:`approvals.authorize`) and claimed it in memory, so it runs once.
    """
    state = IncidentState(failure=stored.failure, incident_id=stored.incident_id, approved_plan_id=stored.plan_id, started_at=tools.clock())
    state.attempts.append(Attempt(
        number=stored.attempt + 1, diagnosis=f"plan {stored.plan_id} approved by {approved_by}", plan=stored.plan,
        verdicts=verdicts, policy_version=tools.policy.version, approved_by=approved_by, started_at=tools.clock(),
    ))
    state.log("approved", f"plan {stored.plan_id} approved by {approved_by}: " + "; ".join(v.command for v in verdicts))
    # one attempt only: the human approved this plan, not whatever the loop would try next
    trace = build_flow(dataclasses.replace(tools, max_attempts=1), start="rollout").run(state)
    return IncidentOutcome(state=state, trace=trace)
