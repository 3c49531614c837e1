"""The offline planner: memory first, then runbooks, then a generic restart.

Sources are tried in order of trust. A verified fix for the same failure fingerprint comes from
memory; otherwise the most specific runbook whose match holds on the evidence; otherwise a restart
of the service. A plan whose steps already failed for this fingerprint is not tried again; when no
untried plan is left the incident is escalated.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import AbstractSet, Mapping

from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure, Plan, PlanSource
from ansible_collections.sentinel.heal.plugins.plugin_utils.memory import Memory, RememberedFix
from ansible_collections.sentinel.heal.plugins.plugin_utils.runbooks import NotApplicable, RunbookLibrary, render_step

GENERIC_RESTART = "service {init_service} restart"


@dataclass(frozen=True)
class Diagnosis:
    """What diagnosis concluded before planning: the remembered fix, if any, and evidence outputs."""

    text: str
    remembered: RememberedFix | None
    outputs: Mapping[str, str]


class OfflinePlanner:
    def __init__(self, runbooks: RunbookLibrary, memory: Memory | None) -> None:
        self.runbooks = runbooks
        self.memory = memory

    def remembered_fix(self, failure: Failure, excluded: AbstractSet[tuple[str, ...]]) -> RememberedFix | None:
        remembered = self.memory.verified_fix(failure.fingerprint) if self.memory else None
        if remembered is None or remembered.plan.templates in excluded:
            return None
        return remembered

    def evidence_commands(self, failure: Failure) -> list[str]:
        """Read-only commands the candidate runbooks want to see the output of, each once, in order."""
        commands: dict[str, None] = {}
        for runbook in self.runbooks.candidates(failure):
            commands.update(dict.fromkeys(runbook.evidence_commands))
        return list(commands)

    def plan(self, failure: Failure, diagnosis: Diagnosis, excluded: AbstractSet[tuple[str, ...]]) -> Plan:
        if diagnosis.remembered is not None:
            remembered = diagnosis.remembered.plan
            try:
                steps = tuple(render_step(step.template, failure, step.may_fail) for step in remembered.steps)
            except NotApplicable:
                pass
            else:
                return Plan(source=PlanSource.MEMORY, reference=remembered.reference, rationale=remembered.rationale, steps=steps)
        matching = [
            runbook for runbook in self.runbooks.candidates(failure)
            if runbook.matches(failure, diagnosis.outputs) and runbook.templates not in excluded
        ]
        for runbook in sorted(matching, key=lambda rb: rb.specificity, reverse=True):
            if runbook.escalate:
                return Plan(
                    source=PlanSource.RUNBOOK, reference=runbook.id, rationale=runbook.title,
                    escalation=runbook.render_escalation(failure, diagnosis.outputs),
                )
            try:
                steps = runbook.render_steps(failure)
            except NotApplicable:
                continue
            return Plan(source=PlanSource.RUNBOOK, reference=runbook.id, rationale=runbook.title, steps=steps)
        if (GENERIC_RESTART,) not in excluded:
            return Plan(
                source=PlanSource.GENERIC, reference="restart", rationale="no runbook matched: restart the service",
                steps=(render_step(GENERIC_RESTART, failure),),
            )
        tried = "; ".join(" && ".join(templates) for templates in sorted(excluded))
        return Plan(
            source=PlanSource.GENERIC, reference="exhausted", rationale="no untried plan is left",
            escalation=f"{failure.service}: every known plan was tried without a verified recovery ({tried})",
        )
