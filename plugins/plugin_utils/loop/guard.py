"""The guard's word on a plan (allow, approve, block; check and observe mode stop here) and the person asked when
it needs one."""

from __future__ import annotations

from typing import Any

from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import PolicyContext, evaluate_plan
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision, Failure, Plan, Verdict
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.graph import ToolNode, plan_of
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import IncidentState


class GuardNode(ToolNode):
    node_name = "guard"

    def prep(self, state: IncidentState) -> tuple[Plan, PolicyContext]:
        return plan_of(state), self.tools.policy_context(state.failure)

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
            plan = plan_of(state)
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


class AskHumanNode(ToolNode):
    """Asks the operator at the terminal, when there is one; otherwise the plan waits, stored."""

    node_name = "ask_human"

    def prep(self, state: IncidentState) -> tuple[Failure, Plan, list[Verdict]]:
        return state.failure, plan_of(state), state.attempt.verdicts

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
