"""The only node that runs a remediation on the host: under a lease, the kill switch read before and polled during
the run, never past the incident's deadline, and stopped when its lease is lost."""

from __future__ import annotations

import functools
import shlex
from dataclasses import dataclass
from typing import Any

from ansible_collections.sentinel.heal.plugins.module_utils._configuration_tests import configuration_test
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.filters import filtered
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ExecutorError, FlowError, HostUnreachable, JobGone, MemoryStoreError
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.steps import HostRequest, RunReport, RunStep
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.leases import Heartbeat, LeaseRefusal, LeaseRequest, Leases, process_owner
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import RESTORE_PROGRAM, Decision, StepResult
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.graph import ToolNode, past_deadline, plan_of, steps_ran
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import Deferred, IncidentState, Suspended


@dataclass(frozen=True)
class Late:
    """The incident's deadline passed before the remediation could start."""


@dataclass(frozen=True)
class LeaseLost:
    """The run was stopped because its lease was lost (``why``): another job may take the host up now."""

    why: str
    report: RunReport


@dataclass(frozen=True)
class Remediation:
    """What execute runs: the guarded steps, the lease it asks for (None without memory), and how long the run may take
    before the incident's deadline."""

    steps: list[RunStep]
    lease: LeaseRequest | None
    time_left: float
    # a plan's canary runs by itself: the other hosts wait for its verification, none would join its run
    alone: bool = False


class ExecuteNode(ToolNode):
    node_name = "execute"

    def prep(self, state: IncidentState) -> Remediation:
        plan = plan_of(state)
        decision = state.attempt.decision
        if not (decision is Decision.ALLOW or (decision is Decision.APPROVE and state.attempt.approved_by)):
            raise FlowError("execute reached without ALLOW or a human's approval", field="decision", value=decision.value)
        judged = tuple(verdict.argv for verdict in state.attempt.verdicts)
        approval = None
        # signed whenever a person approved: the policy's APPROVE, or a plan it allows that review mode sent to a person
        # (a host in review mode runs no step without the signature)
        if state.attempt.approved_by and self.tools.approval_signer is not None:
            approval = self.tools.approval_signer.sign(self.tools.target.name, state.failure.service, judged,
                                                       nonce=state.approved_plan_id or f"{state.incident_id}-{state.attempt.number}",
                                                       now=self.tools.clock())
        restore_test = tuple(configuration_test(state.failure.spec))
        steps = [
            RunStep(argv=verdict.argv, become=verdict.become, may_fail=step.may_fail,
                    on_host=HostRequest(state.failure.service, verdict.policy_version, judged, index, approval=approval,
                                        run=f"{state.incident_id}-{state.attempt.number}", failure_class=state.failure.failure_class,
                                        fingerprint=state.failure.fingerprint),
                    restore_test=restore_test if verdict.argv[0] == RESTORE_PROGRAM else ())
            for index, (step, verdict) in enumerate(zip(plan.steps, state.attempt.verdicts, strict=True))
        ]
        now = self.tools.clock()
        lease = None
        if self.tools.memory is not None:
            lease = LeaseRequest(
                radius=self.tools.blast_radius, incident_id=state.incident_id, failure=state.failure, attempt=state.attempt, at=now,
                # past it, a crashed job's slot is free again
                ttl=self.tools.executor.step_timeout * len(steps) + 60, owner=process_owner(), steps_started=self.tools.steps_started,
                executed_plan_id=state.approved_plan_id, relapsed_from=state.relapsed_from,
            )
        return Remediation(steps, lease, self._deadline(state) - now, alone=state.attempt.number in state.canaries)

    def exec(self, prep_res: Remediation) -> RunReport | LeaseLost | HostUnreachable | Suspended | Deferred | Late:
        thrown = self.tools.suspension()
        if thrown is not None:
            return Suspended(thrown)
        if prep_res.time_left < 1:
            return Late()
        leases = None if self.tools.memory is None else Leases(self.tools.memory.database)
        lease = None
        heartbeat: Heartbeat | None = None
        if leases is not None and prep_res.lease is not None:
            granted = leases.acquire_lease(prep_res.lease)
            if isinstance(granted, LeaseRefusal):
                return Deferred(granted.why, elsewhere=granted.elsewhere, hold=granted.hold(prep_res.lease.radius) if granted.cap else None)
            lease = granted
            heartbeat = Heartbeat(functools.partial(leases.renew_lease, granted), self.tools.clock, since=prep_res.lease.at)
        keep_lease = False

        def stop() -> bool:
            # polled every second while the run goes on, on every node: the lease's heartbeat beats with it, and a
            # lease lost stops the run before another job may start one
            if heartbeat is not None and heartbeat() is not None:
                return True
            return self.tools.suspension() is not None

        try:
            report = self.tools.executor.run(
                self.tools.target, prep_res.steps, purpose="remediation", stop=stop,
                started=None if leases is None or lease is None else functools.partial(leases.lease_run, lease), timeout=prep_res.time_left,
                alone=prep_res.alone,
            )
        except HostUnreachable as exc:
            return exc
        except JobGone:
            keep_lease = True  # the next run records this remediation as interrupted
            raise
        finally:
            if leases is not None and lease is not None and not keep_lease:
                try:
                    leases.release_lease(lease)
                except MemoryStoreError:
                    if heartbeat is None or heartbeat.lost is None:
                        raise
                    # out of reach, as the lost lease said: the next run that reaches the memory reaps the lease
        if heartbeat is not None and heartbeat.lost is not None and report.stopped:
            return LeaseLost(heartbeat.lost, report)
        return report

    def exec_fallback(self, prep_res: Remediation, exc: Exception) -> Any:
        if isinstance(exc, ExecutorError):
            return exc
        raise exc

    def post(self, state: IncidentState, prep_res: Remediation,
             exec_res: RunReport | LeaseLost | ExecutorError | Suspended | Deferred | Late) -> str:
        attempt = state.attempt
        if isinstance(exec_res, Suspended):
            return self._suspended(state, exec_res.describe)
        if isinstance(exec_res, Late):
            return self._held(state, "escalated", past_deadline(state, self.tools.incident_timeout), route="deadline")
        if isinstance(exec_res, Deferred) and exec_res.elsewhere:
            return self._held(state, "in_progress_elsewhere", f"{state.failure.service}: in progress elsewhere, nothing ran here: {exec_res.why}")
        if isinstance(exec_res, Deferred):
            attempt.held_by, meanwhile = exec_res.hold, "the next run takes it up"
            why = f"{exec_res.why}; {meanwhile}" if exec_res.hold is None else exec_res.hold.describe(self.tools.clock(), meanwhile)
            return self._held(state, "deferred", f"{state.failure.service}: deferred, nothing ran: {why}")
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
        lost = exec_res.why if isinstance(exec_res, LeaseLost) else None
        if isinstance(exec_res, LeaseLost):
            exec_res = exec_res.report
        plan = plan_of(state)
        filters = [step.output_filters for step in plan.steps]
        attempt.results = [filtered(result, filters[index]) if index < len(filters) else result for index, result in enumerate(exec_res.results)]
        attempt.artifacts.append(exec_res.artifacts)
        for result in exec_res.results:
            state.log(self.name, f"{result.status} rc={result.rc}: {' '.join(result.argv)}")
        refused = [result for result in exec_res.results if result.status == "refused"]
        if refused and all(result.refused_by == "service-healthy" for result in refused) and not any(
                result.status in ("ok", "failed") for result in exec_res.results):
            # it came back between the check and the plan's first step (systemd's Restart=, a socket's activation):
            # nothing ran, and the host's own check says it answers
            state.reason = f"{state.failure.service} answered again before the plan ran: the host found it healthy ({refused[0].stderr})"
            state.log(self.name, state.reason)
            return "recovered"
        if refused:
            # the host's own judge said no: like the guard's BLOCK, a person looks, nothing is retried
            attempt.outcome = "blocked"
            state.reason = "the host refused the plan: " + "; ".join(f"{shlex.join(result.argv)!r}: {result.stderr}" for result in refused)
            return "refused"
        if lost is not None:
            attempt.outcome = "interrupted"
            ran = steps_ran(attempt)
            state.reason = (f"{state.failure.service}: the remediation was stopped "
                            f"{'after ' + '; '.join(ran) if ran else 'before any step ran'}: this job lost its lease ({lost}); "
                            "it is not healed here, and the next run takes it up")
            state.log(self.name, state.reason)
            return "lease_lost"
        if exec_res.stopped:
            return self._suspended(state, self.tools.suspension() or "the kill switch was thrown during the run")
        return "executed"
