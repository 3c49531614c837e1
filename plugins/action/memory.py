# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.memory, deprecated: each operation is done by the module that replaces it
(plugin_utils/tasks/memory.py), with a deprecation warning that names that module and its form."""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks import memory as memory_tasks

display = Display()

OPERATIONS = ["episodes", "episode", "search", "export", "report", "prune", "forget", "plans", "plan", "deny",
              "suspend", "resume", "suspension", "reset_flapping", "silence", "unsilence", "silences"]

ARGUMENT_SPEC = dict(
    operation=dict(type="str", required=True, choices=OPERATIONS),
    **memory_tasks.MEMORY_SPEC,
    episode_id=dict(type="int"),
    **memory_tasks.EPISODE_FILTERS,
    text=dict(type="str"),
    dest=dict(type="path"),
    format=dict(type="str", default="episodes", choices=["episodes", "audit"]),
    days=dict(type="float"),
    older_than_days=dict(type="float"),
    plan_id=dict(type="str"),
    status=memory_tasks.PLAN_STATUS_OPTION,
    decided_by=dict(type="str"),
    note=dict(type="str", default=""),
    duration=dict(type="str"),
    silence_id=dict(type="int"),
)

REQUIRED_IF = [
    ("operation", "episode", ["episode_id"]),
    ("operation", "search", ["text"]),
    ("operation", "report", ["dest"]),
    ("operation", "prune", ["older_than_days"]),
    ("operation", "forget", ["fingerprint"]),
    ("operation", "plan", ["plan_id"]),
    ("operation", "deny", ["plan_id", "decided_by"]),
    ("operation", "suspend", ["decided_by", "note"]),
    ("operation", "resume", ["decided_by"]),
    ("operation", "reset_flapping", ["host", "service", "decided_by"]),
    ("operation", "silence", ["host", "duration", "decided_by", "note"]),
    ("operation", "unsilence", ["decided_by", "host", "silence_id"], True),
]


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC, required_if=REQUIRED_IF)
        # before the operation, so that a task that fails shows it too
        display.deprecated(memory_tasks.legacy_replacement(args), version="1.0.0", collection_name="sentinel.heal")
        result.update(memory_tasks.perform_legacy(args, check_mode=bool(self._task.check_mode), task_vars=task_vars or {}))
        return result
