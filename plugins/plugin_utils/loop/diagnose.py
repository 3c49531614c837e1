"""Before a plan: whether an incident gets an attempt at all (a silence, a masked unit, the deadline, flapping), the
evidence commands and how the failure reads, which remembered plans the present evidence leaves to try, and the wait
for systemd's own restart."""

from __future__ import annotations

import dataclasses
import functools
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.module_utils._text import moment
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.cause import cause_of, describe, gone
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.placeholders import render_text
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import Diagnosis, Planner
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.reading import PackageDir, Reading, read_failure
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ExecutorError, FlowError, HostUnreachable
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.steps import HostRequest, RunStep
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import Policy, PolicyContext, evaluate
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, Decision, Failure, Hold, StepResult, Verdict
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.engine import DEFAULT_ACTION
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.graph import ToolNode, past_deadline
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import IncidentState
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory, Unhealed


@dataclass(frozen=True)
class Evidence:
    """What the read-only evidence commands answered, and where ansible-runner kept that run."""

    results: dict[str, StepResult] = field(default_factory=dict)
    artifacts: str = ""


@dataclass(frozen=True)
class Diagnosing:
    """What one attempt's diagnosis starts from: the failure, the plans this run tried, the deadline, what the steps of
    the earlier attempts printed (a failed start often says why), and what did not heal this fingerprint in earlier
    runs (a plan that failed is not tried again while the cause it failed on holds)."""

    failure: Failure
    # the attempt this diagnosis opens (post appends it to the incident)
    attempt: Attempt
    excluded: frozenset[tuple[str, ...]]
    deadline: float
    earlier_steps: tuple[StepResult, ...]
    unhealed: tuple[Unhealed, ...] = ()
    # the plan of the heal the failure relapsed from: no longer replayed as a verified fix
    relapsed: tuple[str, ...] | None = None


@dataclass(frozen=True)
class NoAttempt:
    """An incident that gets no attempt now: the route it takes, and what post writes of why (an attempt that records
    a refusal or an escalation, the reason, a warning, a line of the timeline)."""

    route: str
    attempt: Attempt | None = None
    reason: str | None = None
    warning: str | None = None
    logged: bool = False


@dataclass(frozen=True)
class Diagnosed:
    """What diagnosis concluded, the evidence it read, the plans not to try, and what it found changed since earlier
    runs (the cause an earlier run reported gone, a remembered fix sent away), for the timeline."""

    diagnosis: Diagnosis
    evidence: Evidence
    excluded: frozenset[tuple[str, ...]]
    notes: tuple[str, ...] = ()


class DiagnoseNode(ToolNode):
    node_name = "diagnose"

    def prep(self, state: IncidentState) -> Diagnosing | NoAttempt:
        """What to diagnose and the attempt it opens, or the route of an incident that gets no attempt and why."""
        failure = state.failure
        held = self._no_attempt(state)
        if held is not None:
            return held
        earlier_steps = tuple(result for attempt in state.attempts for result in attempt.results)
        memory = self.tools.planner.memory  # read even when nothing may be written (check mode, plan, diagnose)
        earlier = () if memory is None else tuple(memory.unhealed(failure.fingerprint, since=self.tools.clock() - self.tools.failed_plan_ttl))
        return Diagnosing(failure, Attempt(number=len(state.attempts) + 1, started_at=self.tools.clock()), frozenset(state.tried),
                          self._deadline(state), earlier_steps, earlier, state.relapse.heal.templates if state.relapse else None)

    def _no_attempt(self, state: IncidentState) -> NoAttempt | None:
        """A person's decision (a silence, a masked unit), a relapse whose repair something keeps undoing, failing services
        it needs healed before it in this run and not yet waited for, systemd's own restart not yet waited for, the
        deadline, or too many remediations."""
        failure = state.failure
        silenced = self.tools.silence(failure)
        if silenced is not None:
            marker = failure.facts.get("maintenance")
            problem = f"{failure.host}: the maintenance marker {marker.get('path')} {marker['problem']}" if marker and marker.get("problem") else None
            return dataclasses.replace(self._refused(state, "silenced", silenced, "checked, nothing planned or run"), warning=problem)
        if failure.masked_unit is not None:
            return NoAttempt("left_alone", reason=f"{failure.service}: {failure.masked_unit} is masked by a person: not healed, nothing run")
        relapsing = state.relapse.escalation(failure) if state.relapse is not None and not state.attempts else None
        if relapsing is not None:
            escalated = Attempt(number=1, started_at=self.tools.clock(), outcome="escalated", diagnosis=f"not diagnosed: {relapsing}")
            return NoAttempt("relapsing", escalated, reason=f"{failure.service}: {relapsing}", logged=True)
        if state.dependencies and not state.awaited_dependencies:
            return NoAttempt("dependencies")
        if failure.failure_class == "auto_restart" and not state.awaited_systemd:
            return NoAttempt("systemd_restarts")
        if state.attempts and self.tools.clock() >= self._deadline(state):
            return NoAttempt("deadline", reason=past_deadline(state, self.tools.incident_timeout))
        memory = self.tools.planner.memory
        flapping = None if memory is None else flapping_hold(
            memory, failure.host, failure.service, limit=self.tools.flap_limit, window=self.tools.flap_window, now=self.tools.clock(),
            incident_id=state.incident_id)
        if flapping is not None:
            return self._refused(state, "flapping", flapping, "nothing runs")
        return None

    def _refused(self, state: IncidentState, outcome: str, hold: Hold, what: str) -> NoAttempt:
        """A limit refuses the incident an attempt: the refusal is recorded as an episode of its own (what held, until
        when, how to lift it), never counted as a remediation."""
        now = self.tools.clock()
        return NoAttempt(outcome, Attempt(number=len(state.attempts) + 1, started_at=now, outcome=outcome, held_by=hold,
                                          diagnosis=f"not diagnosed: {what}"),
                         reason=f"{state.failure.service}: {hold.describe(now, what)}", logged=True)

    def exec(self, prep_res: Diagnosing | NoAttempt) -> Diagnosed | NoAttempt:
        if isinstance(prep_res, NoAttempt):
            return prep_res
        failure = prep_res.failure
        context = self.tools.policy_context(failure)
        # the present first: what a remembered plan failed on, or a remembered fix healed, is judged against it
        evidence = self._gather(failure, context, prep_res.deadline)
        results = {command: result.to_dict() for command, result in evidence.results.items()}
        excluded, cause_gone = self._excluded(prep_res, results)
        outputs = {command: result.output for command, result in evidence.results.items()}
        passed = [command for command, result in evidence.results.items() if result.rc == 0]
        reading = dataclasses.replace(read_failure(failure, outputs, prep_res.earlier_steps,
                                                   functools.partial(package_dir, self.tools.policy, context), passed), cause_gone=cause_gone)
        remembered, sent_away = self.tools.planner.remembered_fix(failure, excluded, results, prep_res.relapsed)
        notes = tuple(note for note in (cause_gone, sent_away) if note)
        if remembered is not None:
            return Diagnosed(Diagnosis(f"{failure.summary} (seen before: {remembered.plan.rationale})", remembered, outputs, reading),
                             evidence, excluded, notes)
        return Diagnosed(Diagnosis(_diagnosis_text(failure, reading), None, outputs, reading), evidence, excluded, notes)

    def _excluded(self, prep_res: Diagnosing, results: Mapping[str, Mapping[str, Any]]) -> tuple[frozenset[tuple[str, ...]], str | None]:
        """The plans not to try: this run's, and those that failed in earlier runs on a cause that still holds; and,
        when the cause an earlier run reported is gone (a person fixed it between the runs), that it is tried again."""
        failure = prep_res.failure
        excluded = set(prep_res.excluded)
        went_from: tuple[Unhealed, dict[str, str], dict[str, str]] | None = None
        released: list[tuple[str, ...]] = []
        for earlier in prep_res.unhealed:  # newest first
            cause = cause_of(earlier.evidence, earlier.results)
            went = gone(cause, failure.evidence, results)
            if not went:
                if earlier.templates:
                    excluded.add(earlier.templates)
                continue
            went_from = went_from or (earlier, cause, went)
            if earlier.templates:
                released.append(earlier.templates)
        if went_from is None:
            return frozenset(excluded), None
        earlier, cause, went = went_from
        again = [" && ".join(render_text(template, failure, {}) for template in templates)
                 for templates in dict.fromkeys(released) if templates not in excluded]
        reported = moment(earlier.finished_at, self.tools.clock())
        note = (f"{failure.service}: the cause reported at {reported} (episode {earlier.episode_id}, {earlier.outcome}: {describe(cause)}) "
                f"is gone (now: {describe(went)}); trying again"
                + (f", the plan that failed on it too: {'; '.join(again)}" if again else ""))
        return frozenset(excluded), note

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
            excluded, cause_gone = self._excluded(prep_res, {})
            reading = dataclasses.replace(read_failure(failure, {}, prep_res.earlier_steps), cause_gone=cause_gone)
            return Diagnosed(Diagnosis(f"{failure.summary} (evidence commands could not run: {exc})", None, {}, reading), Evidence(),
                             excluded, (cause_gone,) if cause_gone else ())
        raise exc

    def post(self, state: IncidentState, prep_res: Diagnosing | NoAttempt, exec_res: Diagnosed | NoAttempt) -> str:
        if isinstance(exec_res, NoAttempt):
            return self._without_attempt(state, exec_res)
        if not isinstance(prep_res, Diagnosing):
            raise FlowError("diagnose concluded on an incident its prep gave no attempt", field="prep", value=type(prep_res).__name__)
        state.attempts.append(prep_res.attempt)
        diagnosis, evidence, excluded = exec_res.diagnosis, exec_res.evidence, exec_res.excluded
        for note in exec_res.notes:
            state.log(self.name, note)
        results = evidence.results
        attempt = state.attempt
        attempt.diagnosis = "; ".join((diagnosis.text, *exec_res.notes))
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

    def _without_attempt(self, state: IncidentState, held: NoAttempt) -> str:
        if held.warning is not None:
            state.warnings.append(held.warning)
        if held.attempt is not None:
            state.attempts.append(held.attempt)
        if held.reason is not None:
            state.reason = held.reason
            if held.logged:
                state.log(self.name, held.reason)
        return held.route


class AwaitSystemdNode(ToolNode):
    """The unit is down and systemd restarts it by itself (Restart=): wait its RestartSec plus a grace, checking
    as it goes, and run nothing. Restarting it too would fight systemd (and count against its start limit)."""

    node_name = "await_systemd"

    def prep(self, state: IncidentState) -> tuple[Mapping[str, Any], float, float]:
        unit = state.failure.evidence.get("unit") or {}
        remaining = unit.get("restart_in_s")
        delay = float(unit.get("restart_delay_s") or 0.0 if remaining is None else remaining)
        return state.failure.spec, delay, time.time()

    def exec(self, prep_res: tuple[Mapping[str, Any], float, float]) -> Mapping[str, Any] | HostUnreachable:
        spec, delay, _began = prep_res
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

    def post(self, state: IncidentState, prep_res: tuple[Mapping[str, Any], float, float], exec_res: Mapping[str, Any] | HostUnreachable) -> str:
        _spec, delay, began = prep_res
        state.awaited_systemd = True
        unit = state.failure.evidence.get("unit") or {}
        state.log(self.name, f"systemd restarts {state.failure.unit} by itself in {delay:g} s (Restart={unit.get('Restart')}): "
                             "waiting, running nothing", at=began)
        if isinstance(exec_res, HostUnreachable):
            state.reason = f"{state.failure.service}: the host stopped answering while systemd restarted {state.failure.unit}: {exec_res}"
            return "unreachable"
        if exec_res.get("healthy"):
            state.reason = f"{state.failure.service}: systemd's own Restart= brought {state.failure.unit} back; nothing ran"
            return "recovered"
        state.failure = Failure.from_check(state.failure.host, exec_res, state.failure.facts)
        state.log(self.name, f"not back after systemd's restart: {state.failure.failure_class}: {state.failure.summary}")
        return "failing"


def read_step(service: str, verdict: Verdict) -> RunStep:
    """A read-only command the guard allowed, as a step: for the executor on the host, a plan of one read."""
    return RunStep(argv=verdict.argv, become=verdict.become, may_fail=True,
                   on_host=HostRequest(service, verdict.policy_version, (verdict.argv,), 0, kind="read"))


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
    """The directory of the incident's service that ``path`` is, or is in, with the owner, group and mode it should have
    (as the host reads them, else as the policy's package_paths say) and where they come from; None when the path lies
    outside the service's own directories."""
    canonical = policy.paths.canonical(path)
    while canonical and canonical != "/":
        located = policy.package_path(canonical, context)
        if located is not None:
            top, entry = located
            return PackageDir(path=top, owner=entry.owner, group=entry.group, mode=f"{entry.mode:04o}", tree=entry.tree, source=entry.source)
        canonical = canonical.rsplit("/", 1)[0] or "/"
    return None


def flapping_hold(memory: Memory, host: str, service: str, *, limit: int, window: float, now: float, incident_id: str = "") -> Hold | None:
    """Why the service may not be remediated now: it was, ``limit`` times within ``window`` seconds (counted in memory,
    across jobs; every attempt that ran a plan counts, a separate heal that worked too, but not the attempts of the
    incident ``incident_id`` itself, whose retries max_attempts bounds: a first incident is never refused); None when it
    may (or the limit is off)."""
    if limit <= 0:
        return None
    recent = memory.remediations(host, service, since=now - window, other_than=incident_id)
    if len(recent) < limit:
        return None
    return Hold("flapping", f"flapping: remediated {len(recent)} times in the last {window / 60:g} min (episodes "
                f"{', '.join(str(row['id']) for row in recent)}; the limit is {limit}: flap_limit={limit}, flap_window={window:g})",
                f"sentinel.heal.flapping_reset host={host} service={service} decided_by=YOU",
                until=recent[-limit]["started_at"] + window)


def flapping_reason(memory: Memory, host: str, service: str, *, limit: int, window: float, now: float) -> str | None:
    """:func:`flapping_hold` in words, for what refuses before the loop runs (an approved plan, the evidence read ahead)."""
    hold = flapping_hold(memory, host, service, limit=limit, window=window, now=now)
    return None if hold is None else f"{service}: {hold.describe(now, 'nothing runs')}"
