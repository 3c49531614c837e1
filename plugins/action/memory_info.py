# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.memory_info: what the controller's memory holds - episodes, plans, silences, the kill
switch - read, nothing changed (plugin_utils/memory_tasks.py)."""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.sentinel.heal.plugins.plugin_utils import memory_tasks

ARGUMENT_SPEC = dict(
    **memory_tasks.MEMORY_SPEC,
    kind=dict(type="str", default="episodes", choices=["episodes", "plans", "silences", "suspension"]),
    episode_id=dict(type="int"),
    text=dict(type="str"),
    **memory_tasks.EPISODE_FILTERS,
    plan_id=dict(type="str"),
    status=memory_tasks.PLAN_STATUS_OPTION,
)
# one episode, a full-text search (which takes no filters) or the filtered list
MUTUALLY_EXCLUSIVE = [["episode_id", "text"],
                      *([one, name] for one in ("episode_id", "text") for name in ("host", "service", "outcome", "fingerprint"))]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC, mutually_exclusive=MUTUALLY_EXCLUSIVE)
        result.update(memory_tasks.perform(memory_tasks.info, args, check_mode=bool(self._task.check_mode), task_vars=task_vars or {}))
        return result
