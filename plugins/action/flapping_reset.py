# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.flapping_reset: the past remediations of a service on a host no longer count against
its flapping limit (plugin_utils/tasks/memory.py)."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks import memory as memory_tasks

ARGUMENT_SPEC = dict(
    **memory_tasks.MEMORY_SPEC,
    host=dict(type="str", required=True),
    service=dict(type="str", required=True),
    decided_by=memory_tasks.DECIDED_BY_OPTION,
)


class ActionModule(memory_tasks.MemoryTaskAction):
    argument_spec = ARGUMENT_SPEC
    task = staticmethod(memory_tasks.reset_flapping)
