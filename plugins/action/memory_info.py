# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.memory_info: what the controller's memory holds - episodes, plans, silences, the kill
switch - read, nothing changed (plugin_utils/tasks/memory.py)."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks import memory as memory_tasks

ARGUMENT_SPEC = dict(
    **memory_tasks.MEMORY_SPEC,
    kind=dict(type="str", default="episodes", choices=["episodes", "plans", "silences", "suspension", "fleet_incidents"]),
    episode_id=dict(type="int"),
    text=dict(type="str"),
    **memory_tasks.EPISODE_FILTERS,
    plan_id=dict(type="str"),
    status=memory_tasks.PLAN_STATUS_OPTION,
)
# one episode, a full-text search (which takes no filters) or the filtered list
MUTUALLY_EXCLUSIVE = [["episode_id", "text"],
                      *([one, name] for one in ("episode_id", "text") for name in ("host", "service", "outcome", "fingerprint"))]


class ActionModule(memory_tasks.MemoryTaskAction):
    argument_spec = ARGUMENT_SPEC
    validation = dict(mutually_exclusive=MUTUALLY_EXCLUSIVE)
    task = staticmethod(memory_tasks.info)
