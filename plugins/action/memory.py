# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.memory: reads and decides what the controller's memory holds."""

from __future__ import annotations

import time
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.sentinel.heal.plugins.plugin_utils import approvals
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import SentinelError
from ansible_collections.sentinel.heal.plugins.plugin_utils.memory import PLAN_STATUSES, Memory

ARGUMENT_SPEC = dict(
    operation=dict(type="str", required=True, choices=["plans", "plan", "deny"]),
    state_dir=dict(type="path", default="~/.local/state/sentinel-heal"),
    plan_id=dict(type="str"),
    status=dict(type="str", default="pending", choices=sorted(PLAN_STATUSES | {"all"})),
    decided_by=dict(type="str"),
    note=dict(type="str", default=""),
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(
            argument_spec=ARGUMENT_SPEC,
            required_if=[("operation", "plan", ["plan_id"]), ("operation", "deny", ["plan_id", "decided_by"])],
        )
        try:
            with Memory(args["state_dir"]) as memory:
                result.update(self._operate(memory, args))
        except SentinelError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        return result

    def _operate(self, memory: Memory, args: dict[str, Any]) -> dict[str, Any]:
        operation = args["operation"]
        if operation == "plans":
            rows = memory.plans(status=None if args["status"] == "all" else args["status"])
            return {"changed": False, "plans": [approvals.StoredPlan.from_row(row).summary() for row in rows]}
        stored = approvals.load(memory, args["plan_id"])
        if operation == "plan":
            return {"changed": False, "plan": stored.summary()}
        if self._task.check_mode:
            return {"changed": stored.status == "pending", "plan": stored.summary()}
        if not memory.deny_plan(stored.plan_id, by=args["decided_by"], at=time.time(), note=args["note"]):
            raise AnsibleActionFail(f"plan {stored.plan_id} is {stored.status}, not pending: it cannot be denied")
        return {"changed": True, "plan": approvals.load(memory, stored.plan_id).summary()}
