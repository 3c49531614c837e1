# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.service_check: resolves where the check runs as root (enforcement), runs the module,
masks the play's secrets in its result (plugin_utils/tasks/service_check.py)."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.service_check import ServiceCheckAction


class ActionModule(ServiceCheckAction):
    """All of it in plugin_utils/tasks/service_check.py."""
