# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.memory_prune: forgets old episodes and their runs, or every episode of one failure
fingerprint (plugin_utils/tasks/memory.py)."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks import memory as memory_tasks

ARGUMENT_SPEC = dict(
    **memory_tasks.MEMORY_SPEC,
    older_than_days=dict(type="float"),
    fingerprint=dict(type="str"),
)
ONE_OF = [["older_than_days", "fingerprint"]]


class ActionModule(memory_tasks.MemoryTaskAction):
    argument_spec = ARGUMENT_SPEC
    validation = dict(mutually_exclusive=ONE_OF, required_one_of=ONE_OF)
    task = staticmethod(memory_tasks.prune)
