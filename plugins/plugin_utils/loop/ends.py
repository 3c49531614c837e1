"""Where an incident ends: one node per final status, each writing it on the state, and check mode's stop."""

from __future__ import annotations

from typing import Any

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import stood_in
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision, Status, puts_back_said
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.engine import DEFAULT_ACTION
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.graph import ToolNode
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import IncidentState

CHECK_ONLY_STATUS = {Decision.ALLOW: Status.PLANNED, Decision.APPROVE: Status.AWAITING_APPROVAL, Decision.BLOCK: Status.ESCALATED}


class _EndNode(ToolNode):
    status = ""

    def post(self, state: IncidentState, prep_res: Any, exec_res: Any) -> str:
        """The status; a relapse's reason says first what it relapsed from (when it was healed, by what, when it failed
        again and how), whatever it ends as."""
        state.status = self.status
        if state.relapse is not None:
            story = state.relapse.describe(state.failure)
            state.reason = f"{story}. {state.reason}" if state.reason else story
        state.log(self.name, self.status + (f": {state.reason}" if state.reason and self.status != Status.HEALED.value else ""))
        return DEFAULT_ACTION


class HealedNode(_EndNode):
    node_name = "healed"
    status = Status.HEALED.value


class EscalateNode(_EndNode):
    """A person is paged: what changed since the service last worked comes first, since most outages follow a change,
    then the fleet incident the failure is part of, since its cause is most likely what the hosts share, then what this
    run already did that did not hold (a unit reset and started that systemd gave up on again: both give-ups); last,
    when the LLM was asked and failed, what failed and the option that fixes it (the offline planner's plans are
    blinder)."""

    node_name = "escalate"
    status = Status.ESCALATED.value

    def post(self, state: IncidentState, prep_res: Any, exec_res: Any) -> str:
        fleet = state.fleet_incident
        lead = [said for said in (state.failure.what_changed,
                                  fleet.describe() if fleet and f"fleet incident {fleet.id}:" not in state.reason else None,
                                  _did_not_hold(state)) if said]
        llm = stood_in(state.llm_failure) if state.llm_failure and state.llm_failure not in state.reason else None
        state.reason = ". ".join(said for said in (*lead, state.reason, llm) if said)
        return super().post(state, prep_res, exec_res)


def _did_not_hold(state: IncidentState) -> str:
    """What the attempts of this run ran that ended without a verified recovery, each with what the check said after it,
    where the reason does not say it already ("still failing after attempt 1")."""
    said = [f"attempt {attempt.number} ran {'; '.join(' '.join(step.argv) for step in attempt.plan.steps)} and it failed again: "
            f"{attempt.verification.get('summary') or 'not verified'}"
            for attempt in state.attempts if attempt.plan and attempt.plan.steps and attempt.results and not attempt.verified
            # a run stopped when its lease was lost was not checked: the reason says what it ran
            and attempt.outcome != "interrupted" and f"after attempt {attempt.number}" not in state.reason]
    return "; ".join(said)


class AwaitApprovalNode(_EndNode):
    """The plan waits for a person: its reason says what its restores would put back, so the job's output (the task's
    summary and the timeline, where no terminal showed the diff) does."""

    node_name = "await_approval"
    status = Status.AWAITING_APPROVAL.value

    def post(self, state: IncidentState, prep_res: Any, exec_res: Any) -> str:
        plan = state.attempts[-1].plan if state.attempts else None
        said = puts_back_said(state.failure.puts_back(plan)) if plan else ""
        if said:
            state.reason = f"{state.reason}{said}" if state.reason else said[2:]
        return super().post(state, prep_res, exec_res)


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
    """A person silenced the host or service (sentinel.heal.silence): checked, nothing else."""

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


class CheckOnlyNode(ToolNode):
    node_name = "check_only"

    def post(self, state: IncidentState, prep_res: Any, exec_res: Any) -> str:
        state.status = CHECK_ONLY_STATUS[state.attempt.decision].value
        state.log(self.name, f"check mode: nothing ran; the plan would be {state.attempt.decision.value}")
        return DEFAULT_ACTION
