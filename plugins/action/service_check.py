# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.service_check: runs the module, then masks the play's secrets in its result.

The module masks secret patterns on the host; the literal secrets the play knows (vault values,
passwords) are masked here, on the controller, so they never travel to the host.
"""

from __future__ import annotations

from typing import Any

from ansible.plugins.action import ActionBase

from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.adapter import SERVICE_CHECK
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.secrets import known_secrets, redact


class ActionModule(ActionBase):
    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        module_result = self._execute_module(module_name=SERVICE_CHECK, module_args=dict(self._task.args), task_vars=task_vars)
        result.update(redact(module_result, known_secrets(task_vars)))
        return result
