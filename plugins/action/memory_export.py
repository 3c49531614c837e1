# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.memory_export: the episodes as JSON, the audit trail as JSON Lines or the history as one
HTML page, written or returned (plugin_utils/tasks/memory.py)."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks import memory as memory_tasks

ARGUMENT_SPEC = dict(
    **memory_tasks.MEMORY_SPEC,
    format=dict(type="str", default="episodes", choices=["episodes", "audit", "history"]),
    dest=dict(type="path"),
    days=dict(type="float"),
    **memory_tasks.EPISODE_FILTERS,
)
REQUIRED_IF = [("format", "history", ["dest"])]


class ActionModule(memory_tasks.MemoryTaskAction):
    argument_spec = ARGUMENT_SPEC
    validation = dict(required_if=REQUIRED_IF)
    task = staticmethod(memory_tasks.export)
