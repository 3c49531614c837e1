# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.policy_check: the guard's verdicts for commands, on the controller (plugin_utils/tasks/policy_check.py)."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.policy_check import PolicyCheckAction


class ActionModule(PolicyCheckAction):
    """All of it in plugin_utils/tasks/policy_check.py."""
