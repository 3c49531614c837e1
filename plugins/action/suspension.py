# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.suspension: throws or releases the kill switch of every job that shares the memory
(plugin_utils/memory_tasks.py)."""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.sentinel.heal.plugins.plugin_utils import memory_tasks

ARGUMENT_SPEC = dict(
    **memory_tasks.MEMORY_SPEC,
    state=dict(type="str", default="present", choices=["present", "absent"]),
    decided_by=memory_tasks.DECIDED_BY_OPTION,
    note=dict(type="str"),
)
REQUIRED_IF = [("state", "present", ["note"])]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC, required_if=REQUIRED_IF)
        result.update(memory_tasks.perform(memory_tasks.suspension, args, check_mode=bool(self._task.check_mode), task_vars=task_vars or {}))
        return result
