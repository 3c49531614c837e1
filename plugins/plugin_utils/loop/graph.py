"""The heal loop for one incident, as an explicit graph of nodes: its edges (EDGES), and ToolNode, the base every node
of it is built on.

    diagnose ─silenced─▶ record ─silenced─▶ silenced   (a person's silence, maintenance marker or window covers it: checked,
                                                       nothing run; the refusal is an episode, not an attempt)
    diagnose ─left_alone─▶ left_alone      (a unit a person masked: nothing runs, no attempt)
    diagnose ─dependencies─▶ dependencies ─recovered─▶ recovered   (failing services it needs were healed first in this run,
                                                                    and it answers again: nothing ran; loop/dependencies.py)
                                          └─failing──▶ diagnose    (still failing once they are back: healed as any incident)
                                          └─escalate─▶ escalate    (one needs a person: so does this one, never healed blindly)
                                          └─deferred─▶ deferred    (one waits, for approval or the next run: so does this one)
    diagnose ─flapping─▶ record ─escalate─▶ escalate   (remediated flap_limit times within flap_window by earlier incidents:
                                                       nothing runs; the refusal is an episode, not an attempt)
    diagnose ─relapsing─▶ record ─escalate─▶ escalate   (failed again within relapse_window after a heal, and the same
                                                        cause is back or it is the second relapse in a row: nothing runs;
                                                        loop/relapse.py)
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
    rollout ─fleet─▶ record ─escalate─▶ escalate   (part of a fleet incident: a new plan runs on no host, a verified one
                                       only on the incident's canary first, and nowhere once it failed there; fleet/incidents.py)
    execute ─recovered─▶ recovered     (the host's executor refused the first step: the service answers again there)
    execute ─suspended─▶ record        (the kill switch: read before the run and polled during it)
    execute ─deferred─▶ record         (the blast radius or the run's attempt budget is spent: no lease) · record ─deferred─▶ deferred
    execute ─in_progress_elsewhere─▶ record   (another run remediates this service on this host now)
                                       · record ─in_progress_elsewhere─▶ in_progress_elsewhere
    execute ─deadline─▶ record         (the incident's deadline passed: the run does not start; a run's timeout is what is left)
    execute ─lease_lost─▶ record ─escalate─▶ escalate   (this job's lease was taken back or not renewed in time: its run is
                                       stopped, before another job may remediate the service too; fleet/leases.py)
    verify ─unreachable─▶ record       (the host stopped answering after the run: the attempt is recorded unreachable)
    guard ─check_mode─▶ check_only     (--check: stop before anything runs or is written)
    guard ─observe─▶ observed          (observe mode: what it would run, and why; nothing runs, waits or is written)
    guard ─approve─▶ ask_human         (also every plan in review mode, even one the policy allows)

Every edge, as EDGES has it (tests/unit/plugins/plugin_utils/loop/test_graph.py draws this from EDGES and fails
when the two differ; the picture above must use only these):

    dependencies  ─recovered─▶ recovered · ─failing─▶ diagnose · ─escalate─▶ escalate · ─deferred─▶ deferred
                  · ─unreachable─▶ unreachable
    diagnose      ─▶ plan · ─left_alone─▶ left_alone · ─dependencies─▶ dependencies · ─systemd_restarts─▶ await_systemd
                  · ─flapping─▶ record · ─deadline─▶ escalate · ─silenced─▶ record · ─relapsing─▶ record
    await_systemd ─recovered─▶ recovered · ─failing─▶ diagnose · ─unreachable─▶ unreachable
    plan          ─planned─▶ guard · ─escalate─▶ record · ─investigate─▶ observe
    observe       ─▶ plan
    guard         ─allow─▶ rollout · ─approve─▶ ask_human · ─block─▶ record · ─check_mode─▶ check_only
                  · ─observe─▶ observed
    ask_human     ─approved─▶ rollout · ─pending─▶ record · ─denied─▶ record
    rollout       ─proceed─▶ execute · ─halted─▶ record · ─deferred─▶ record · ─suspended─▶ record · ─fleet─▶ record
    execute       ─executed─▶ verify · ─recovered─▶ recovered · ─refused─▶ record · ─unreachable─▶ record
                  · ─suspended─▶ record · ─deferred─▶ record · ─deadline─▶ record · ─in_progress_elsewhere─▶ record
                  · ─lease_lost─▶ record
    verify        ─healthy─▶ record · ─failing─▶ record · ─unreachable─▶ record
    record        ─healed─▶ healed · ─retry─▶ diagnose · ─escalate─▶ escalate · ─await─▶ await_approval
                  · ─unreachable─▶ unreachable · ─suspended─▶ suspended · ─deferred─▶ deferred
                  · ─in_progress_elsewhere─▶ in_progress_elsewhere · ─halted─▶ halted · ─silenced─▶ silenced

Every attempt is recorded as one episode; a remediation holds a lease in memory while it runs, so one whose job
died is recorded ``interrupted`` by the next run. Only a verified recovery ends ``healed``. A command
reaches the host only through ``execute``, which runs a plan only when the guard said ALLOW or a
human approved it: at the prompt of ``ask_human``, or later through :func:`flow.run_approved_plan`,
which starts the graph at ``rollout`` with a stored plan that :mod:`approvals` re-validated.
"""

from __future__ import annotations

from typing import Any, Mapping

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import FlowError
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, Hold, Plan
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.engine import DEFAULT_ACTION, Node
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import IncidentState, Toolkit


def plan_of(state: IncidentState) -> Plan:
    if state.attempt.plan is None:
        raise FlowError("a node that needs a plan ran before plan", field="plan", value=None)
    return state.attempt.plan


class ToolNode(Node[IncidentState]):
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
        state.attempt.held_by = Hold("suspension", thrown, "sentinel.heal.suspension state=absent decided_by=YOU (the playbook: ansible-playbook "
                                     "sentinel.heal.suspend -e resume=true)", ends="until a person resumes healing")
        ran = steps_ran(state.attempt)
        state.reason = (f"{state.failure.service}: autonomous remediation is "
                        + state.attempt.held_by.describe(self.tools.clock(), f"stopped after {'; '.join(ran)}" if ran else "nothing ran"))
        state.log(self.name, state.reason)
        return "suspended"


def steps_ran(attempt: Attempt) -> list[str]:
    """The attempt's steps that started, as commands."""
    return [" ".join(result.argv) for result in attempt.results if result.status != "skipped"]


def past_deadline(state: IncidentState, timeout: float) -> str:
    ran = len([attempt for attempt in state.attempts if attempt.results])
    return (f"{state.failure.service}: the incident's deadline ({timeout:g} s) passed after {ran} remediation attempt(s); "
            f"nothing more runs in this job; last: {state.failure.summary}")


EDGES: Mapping[str, Mapping[str, str]] = {
    "dependencies": {"recovered": "recovered", "failing": "diagnose", "escalate": "escalate", "deferred": "deferred", "unreachable": "unreachable"},
    "diagnose": {DEFAULT_ACTION: "plan", "left_alone": "left_alone", "dependencies": "dependencies", "systemd_restarts": "await_systemd",
                 "flapping": "record", "deadline": "escalate", "silenced": "record", "relapsing": "record"},
    "await_systemd": {"recovered": "recovered", "failing": "diagnose", "unreachable": "unreachable"},
    "plan": {"planned": "guard", "escalate": "record", "investigate": "observe"},
    "observe": {DEFAULT_ACTION: "plan"},
    "guard": {"allow": "rollout", "approve": "ask_human", "block": "record", "check_mode": "check_only", "observe": "observed"},
    "ask_human": {"approved": "rollout", "pending": "record", "denied": "record"},
    "rollout": {"proceed": "execute", "halted": "record", "deferred": "record", "suspended": "record", "fleet": "record"},
    "execute": {"executed": "verify", "recovered": "recovered", "refused": "record", "unreachable": "record", "suspended": "record",
                "deferred": "record", "deadline": "record", "in_progress_elsewhere": "record", "lease_lost": "record"},
    "verify": {"healthy": "record", "failing": "record", "unreachable": "record"},
    "record": {"healed": "healed", "retry": "diagnose", "escalate": "escalate", "await": "await_approval", "unreachable": "unreachable",
               "suspended": "suspended", "deferred": "deferred", "in_progress_elsewhere": "in_progress_elsewhere", "halted": "halted",
               "silenced": "silenced"},
}
