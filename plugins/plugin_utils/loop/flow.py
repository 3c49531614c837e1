"""The heal loop as a Flow of every node along the graph's edges, and the ways into it: heal an incident, only
diagnose it, or carry out a plan a person approved."""

from __future__ import annotations

import dataclasses
from typing import Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.llm import TokenBudget
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import LLMUse
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import FleetIncident
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard import approvals
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, Failure, Verdict
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.dependencies import AwaitDependenciesNode
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.diagnose import AwaitSystemdNode, DiagnoseNode
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.ends import (
    AwaitApprovalNode,
    CheckOnlyNode,
    DeferredNode,
    EscalateNode,
    HaltedNode,
    HealedNode,
    InProgressElsewhereNode,
    LeftAloneNode,
    ObservedNode,
    RecoveredNode,
    SilencedNode,
    SuspendedNode,
    UnreachableNode,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.engine import Flow
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.execute import ExecuteNode
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.graph import EDGES, ToolNode
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.guard import AskHumanNode, GuardNode
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.observe import ObserveNode
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.plan import PlanNode
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.record import RecordNode
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.relapse import relapse_of, relapse_of_incident
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.rollout import RolloutNode
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import DependencyOutcome, IncidentOutcome, IncidentState, Toolkit
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.verify import VerifyNode


def build_flow(tools: Toolkit, start: str = "diagnose") -> Flow[IncidentState]:
    node_types: list[type[ToolNode]] = [
        AwaitDependenciesNode,
        DiagnoseNode, AwaitSystemdNode, PlanNode, ObserveNode, GuardNode, AskHumanNode, RolloutNode, ExecuteNode, VerifyNode, RecordNode,
        HealedNode, EscalateNode, AwaitApprovalNode, UnreachableNode, SuspendedNode, DeferredNode, InProgressElsewhereNode, HaltedNode,
        RecoveredNode,
        SilencedNode, LeftAloneNode,
        ObservedNode, CheckOnlyNode,
    ]
    nodes = {node_type.node_name: node_type(tools) for node_type in node_types}
    return Flow(start=start, nodes=nodes, edges=EDGES, entering=lambda node, state: tools.progress(state, node))


def heal_incident(failure: Failure, tools: Toolkit, dependencies: Sequence[DependencyOutcome] = (),
                  fleet_incident: FleetIncident | None = None) -> IncidentOutcome:
    """Heal one failed service; ``dependencies``: the failing services it needs, healed before it in this run;
    ``fleet_incident``: the one it is part of, when many hosts fail alike."""
    llm = tools.planner.llm
    state = IncidentState(failure=failure, started_at=tools.clock(), llm_use=LLMUse(TokenBudget(llm.settings.token_budget)) if llm else None,
                          dependencies=tuple(dependencies), fleet_incident=fleet_incident)
    state.relapse = relapse_of(tools.planner.memory, failure, now=state.started_at, window=tools.relapse_window)
    state.log("start", f"{failure.failure_class}: {failure.summary}")
    if state.relapse is not None:
        state.log("relapse", state.relapse.describe(failure))
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
    state = IncidentState(failure=stored.failure, incident_id=stored.incident_id, approved_plan_id=stored.plan_id, started_at=tools.clock(),
                          relapse=relapse_of_incident(tools.planner.memory, stored.incident_id))
    state.attempts.append(Attempt(
        number=stored.attempt + 1, diagnosis=f"plan {stored.plan_id} approved by {approved_by}", plan=stored.plan,
        verdicts=verdicts, policy_version=tools.policy.version, approved_by=approved_by, started_at=tools.clock(),
    ))
    state.log("approved", f"plan {stored.plan_id} approved by {approved_by}: " + "; ".join(v.command for v in verdicts))
    # one attempt only: the human approved this plan, not whatever the loop would try next
    trace = build_flow(dataclasses.replace(tools, max_attempts=1), start="rollout").run(state)
    return IncidentOutcome(state=state, trace=trace)
