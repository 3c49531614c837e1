# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.heal: adapts a task to the heal loop in plugin_utils.healing."""

from __future__ import annotations

from typing import Any, Mapping

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.sentinel.heal.plugins.module_utils._probe import SERVICE_OPTIONS
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import SentinelError
from ansible_collections.sentinel.heal.plugins.plugin_utils.healing import Toolkit, heal_incident
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure
from ansible_collections.sentinel.heal.plugins.plugin_utils.memory import Memory
from ansible_collections.sentinel.heal.plugins.plugin_utils.planner import OfflinePlanner
from ansible_collections.sentinel.heal.plugins.plugin_utils.policy import load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.report import host_result
from ansible_collections.sentinel.heal.plugins.plugin_utils.runbooks import RunbookLibrary
from ansible_collections.sentinel.heal.plugins.plugin_utils.runner import RunnerExecutor
from ansible_collections.sentinel.heal.plugins.plugin_utils.target import target_for_task

SERVICE_CHECK = "sentinel.heal.service_check"

ARGUMENT_SPEC = dict(
    services=dict(type="list", elements="dict", required=True, options=SERVICE_OPTIONS),
    failures=dict(type="list", elements="dict"),
    state_dir=dict(type="path", default="~/.local/state/sentinel-heal"),
    max_attempts=dict(type="int", default=3),
    runbooks=dict(type="list", elements="path", default=[]),
    policy=dict(type="path"),
    verify_retries=dict(type="int", default=3),
    verify_delay=dict(type="float", default=2.0),
    step_timeout=dict(type="int", default=120),
    log_lines=dict(type="int", default=20),
)

LIMITS = {"max_attempts": (1, 10), "verify_retries": (1, 30), "step_timeout": (1, 3600)}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        for name, (low, high) in LIMITS.items():
            if not low <= args[name] <= high:
                raise AnsibleActionFail(f"{name}: {args[name]!r} is out of range ({low}-{high})")
        host = task_vars.get("inventory_hostname", "localhost")
        try:
            failures = self._failures(host, args, task_vars)
            if not failures:
                result.update(host_result(host, [], check_mode=self._task.check_mode))
                return result
            with Memory(args["state_dir"]) as memory:
                tools = Toolkit(
                    planner=OfflinePlanner(RunbookLibrary.load(args["runbooks"]), memory),
                    policy=load_policy(args["policy"]),
                    executor=RunnerExecutor(f"{args['state_dir']}/runs", step_timeout=args["step_timeout"]),
                    target=target_for_task(host, self._connection, task_vars, self._templar),
                    verify=lambda spec: self._check_one(spec, args, task_vars),
                    memory=None if self._task.check_mode else memory,
                    check_mode=bool(self._task.check_mode),
                    max_attempts=args["max_attempts"],
                    verify_retries=args["verify_retries"],
                    verify_wait=args["verify_delay"],
                )
                outcomes = [heal_incident(failure, tools) for failure in failures]
        except SentinelError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        result.update(host_result(host, outcomes, check_mode=self._task.check_mode))
        return result

    def _failures(self, host: str, args: Mapping[str, Any], task_vars: dict[str, Any]) -> list[Failure]:
        if args["failures"] is None:
            checked = self._service_check(args["services"], args, task_vars)
            raw_failures = checked["failures"]
        else:
            raw_failures = args["failures"]
        return [Failure.from_check(host, raw) for raw in raw_failures]

    def _service_check(self, services: list[Mapping[str, Any]], args: Mapping[str, Any], task_vars: dict[str, Any]) -> Mapping[str, Any]:
        checked = self._execute_module(
            module_name=SERVICE_CHECK,
            module_args={"services": list(services), "log_lines": args["log_lines"]},
            task_vars=task_vars,
        )
        if checked.get("failed") or checked.get("unreachable"):
            raise AnsibleActionFail(f"{SERVICE_CHECK} failed: {checked.get('msg', checked)}")
        return checked

    def _check_one(self, spec: Mapping[str, Any], args: Mapping[str, Any], task_vars: dict[str, Any]) -> Mapping[str, Any]:
        checked = self._service_check([spec], args, task_vars)
        return checked["services"][0]
