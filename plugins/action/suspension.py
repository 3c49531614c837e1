# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.suspension: throws or releases the kill switch of every job that shares the memory
(plugin_utils/tasks/memory.py)."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks import memory as memory_tasks

ARGUMENT_SPEC = dict(
    **memory_tasks.MEMORY_SPEC,
    state=dict(type="str", default="present", choices=["present", "absent"]),
    decided_by=memory_tasks.DECIDED_BY_OPTION,
    note=dict(type="str"),
)
REQUIRED_IF = [("state", "present", ["note"])]


class ActionModule(memory_tasks.MemoryTaskAction):
    argument_spec = ARGUMENT_SPEC
    validation = dict(required_if=REQUIRED_IF)
    task = staticmethod(memory_tasks.suspension)
