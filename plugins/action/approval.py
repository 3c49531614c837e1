# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.approval: denies a plan that waits for a person, so that it never runs
(plugin_utils/tasks/memory.py)."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.destinations import NOTIFY_OPTION
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks import memory as memory_tasks

ARGUMENT_SPEC = dict(
    **memory_tasks.MEMORY_SPEC,
    plan_id=dict(type="str", required=True),
    # required, though it has one choice: a task that names a plan must never read as its approval
    decision=dict(type="str", required=True, choices=["denied"]),
    decided_by=memory_tasks.DECIDED_BY_OPTION,
    note=dict(type="str", default=""),
    notify=NOTIFY_OPTION,
)


class ActionModule(memory_tasks.MemoryTaskAction):
    argument_spec = ARGUMENT_SPEC
    task = staticmethod(memory_tasks.deny)
