# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.heal: adapts a task to a heal session (plugin_utils/tasks/heal.py)."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.options import HEAL_SPEC
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.heal import HealSession
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.loop_action import LoopAction


class ActionModule(LoopAction):
    argument_spec = HEAL_SPEC
    session = HealSession
