"""The two tasks that take failures through the loop up to the guard and write nothing: plan (the plan and the guard's
verdicts, nothing run) and diagnose (what memory, the runbooks and read-only evidence say, no LLM)."""

from __future__ import annotations

from typing import Any

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.reading import NOTHING_READ
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import FleetView
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision, Failure
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import diagnose_incident, heal_incident
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.options import PLANNING_SPEC
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import Toolkit
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.heal import HealSession


class PlanSession(HealSession):
    writes = False

    def handle(self, failures: list[Failure], tools: Toolkit | None, fleet: FleetView | None = None) -> dict[str, Any]:
        # a session that never writes reports no check to the fleet, so it is part of no fleet incident (fleet is None)
        plans = []
        for failure in failures:
            if tools is None:
                continue
            incident = heal_incident(failure, tools).to_dict()
            plans.append({key: incident[key] for key in ("service", "fingerprint", "failure_class", "summary", "plan", "verdicts",
                                                         "decision", "reason", "path", "llm")})
        decisions = [Decision(plan["decision"]) for plan in plans if plan["decision"]]
        return {"changed": False, "plans": plans, "decision": Decision.strictest(decisions).value if plans else None}


# Diagnosis needs no LLM: it is what the planner is given, not a plan.
DIAGNOSE_SPEC = {name: option for name, option in PLANNING_SPEC.items() if name not in ("llm", "knowledge", "embeddings")}


class DiagnosisSession(HealSession):
    writes = False

    def handle(self, failures: list[Failure], tools: Toolkit | None, fleet: FleetView | None = None) -> dict[str, Any]:
        # a session that never writes reports no check to the fleet, so it is part of no fleet incident (fleet is None)
        diagnoses = [self._diagnosis(failure, tools) for failure in failures if tools is not None]
        return {"changed": False, "diagnoses": diagnoses}

    @staticmethod
    def _diagnosis(failure: Failure, tools: Toolkit) -> dict[str, Any]:
        state = diagnose_incident(failure, tools)
        planner = tools.planner
        diagnosis = state.diagnosis
        outputs = dict(diagnosis.outputs) if diagnosis else {}
        reading = diagnosis.reading if diagnosis else NOTHING_READ
        remembered = diagnosis.remembered if diagnosis else None
        return {
            "service": failure.service,
            "failure_class": failure.failure_class,
            "summary": failure.summary,
            "fingerprint": failure.fingerprint,
            "diagnosis": diagnosis.text if diagnosis else "",
            "remembered_fix": remembered.plan.to_dict() if remembered else None,
            "reading": reading.to_dict(),
            "runbooks": [rb.id for rb in planner.runbooks.candidates(failure) if rb.matches(failure, outputs, reading)],
            "evidence": {command: result.to_dict() for command, result in state.attempt.evidence_results.items()},
            "similar_fixes": planner.memory.similar_fixes(failure) if planner.memory else [],
            "failed_plans": [list(templates) for templates in sorted(state.excluded)],
        }
