"""What sentinel.heal.service_check's action does around the module: it resolves where the check runs as root
(``enforcement``: the executor on the host, or the module itself), runs the module, then masks the play's secrets in
its result.

The module masks secret patterns on the host; the literal secrets the play knows (vault values, passwords) are masked
here, on the controller, so they never travel to the host."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import HostUnreachable, SentinelError
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.adapter import SERVICE_CHECK, privilege_for_host
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.secrets import known_secrets, redact


class ServiceCheckAction(ActionBase):
    """The action of sentinel.heal.service_check."""

    TRANSFERS_FILES = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        args = dict(self._task.args)
        enforcement = args.pop("enforcement", "controller")
        policy_file = args.pop("policy_file", None)
        if enforcement not in ("auto", "host", "controller"):
            raise AnsibleActionFail(f"enforcement must be one of auto, host, controller, not {enforcement!r}")
        asked = {"step_privilege": "become" if enforcement == "controller" else "auto"}
        try:
            with privilege_for_host(self, asked, task_vars) as resolved:
                if resolved["step_privilege"] == "executor" and not args.get("through_executor"):
                    args.update(through_executor=True, policy_version=load_policy(policy_file or None).version)
                elif enforcement == "host":
                    raise AnsibleActionFail(f"enforcement=host, and {task_vars.get('inventory_hostname')} has no executor: apply "
                                            "playbooks/host.yml (the role sentinel.heal.host) to it, or check with enforcement=auto")
                module_result = self._execute_module(module_name=SERVICE_CHECK, module_args=args, task_vars=task_vars)
        except HostUnreachable as exc:
            return dict(result, unreachable=True, msg=str(exc))
        except SentinelError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        result.update(redact(module_result, known_secrets(task_vars)))
        return result
