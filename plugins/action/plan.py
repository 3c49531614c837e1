# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.plan: the heal loop up to the guard, nothing run, nothing written."""

from __future__ import annotations

from typing import Any

from ansible_collections.sentinel.heal.plugins.action.heal import ActionModule as HealAction
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import FleetView
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision, Failure
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.options import PLANNING_SPEC
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.session import HealSession
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import Toolkit


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


class ActionModule(HealAction):
    argument_spec = PLANNING_SPEC
    session = PlanSession
