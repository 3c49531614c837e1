# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.plan: the heal loop up to the guard, nothing run, nothing written
(plugin_utils/tasks/planning.py)."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.options import PLANNING_SPEC
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.loop_action import LoopAction
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.planning import PlanSession


class ActionModule(LoopAction):
    argument_spec = PLANNING_SPEC
    session = PlanSession
