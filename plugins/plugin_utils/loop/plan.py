"""The plan node: the planner's answer for this attempt, a plan or the reads it asks for first."""

from __future__ import annotations

import copy
import dataclasses
from typing import Any

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.investigation import Investigation, Thinking
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import Diagnosis, LLMUse, stood_in
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import FlowError
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure, Plan, PlanSource
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.graph import ToolNode
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import IncidentState


class PlanNode(ToolNode):
    node_name = "plan"

    def prep(self, state: IncidentState) -> tuple[Failure, Diagnosis, frozenset[tuple[str, ...]], LLMUse | None, Thinking, float]:
        if state.diagnosis is None:
            raise FlowError("plan ran before diagnose", field="diagnosis", value=None)
        # what the LLM cost so far, for the planner to add to; post keeps it (the planner writes no state of its own)
        llm_use = None if state.llm_use is None else dataclasses.replace(copy.deepcopy(state.llm_use), fallback=None)
        rounds = tuple(state.attempt.rounds)
        thinking = Thinking(rounds, max(self.tools.think_rounds - len(rounds), 0))
        return state.failure, state.diagnosis, state.excluded, llm_use, thinking, self._deadline(state) - self.tools.clock()

    def exec(self, prep_res: tuple[Failure, Diagnosis, frozenset[tuple[str, ...]], LLMUse | None, Thinking, float]) -> Plan | Investigation:
        return self.tools.planner.plan(*prep_res)

    def post(self, state: IncidentState, prep_res: Any, exec_res: Plan | Investigation) -> str:
        state.llm_use = prep_res[3]
        if state.llm_use is not None and state.llm_use.fallback:
            state.llm_failure = state.llm_use.fallback
            state.log(self.name, stood_in(state.llm_use.fallback))
        elif exec_res.source is PlanSource.LLM:
            state.llm_failure = None  # it answered this time: its earlier failure is not why the incident ends as it does
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
