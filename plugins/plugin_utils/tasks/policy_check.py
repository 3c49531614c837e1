"""What sentinel.heal.policy_check does: the guard's verdicts for commands, on the controller, judged as one plan in the
context of a service or of a failure a check found (the same judge the heal loop and the host's executor use)."""

from __future__ import annotations

from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import SentinelError
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import PolicyContext, evaluate_plan, load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure

POLICY_CHECK_SPEC: dict[str, Any] = dict(
    commands=dict(type="list", elements="str", required=True),
    service=dict(type="str"),
    failure=dict(type="dict"),
    policy=dict(type="path"),
)


class PolicyCheckAction(ActionBase):
    """The action of sentinel.heal.policy_check."""

    TRANSFERS_FILES = False
    _requires_connection = False
    argument_spec: dict[str, Any] = POLICY_CHECK_SPEC

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=self.argument_spec, mutually_exclusive=[("service", "failure")])
        host = (task_vars or {}).get("inventory_hostname", "localhost")
        try:
            policy = load_policy(args["policy"])
            if args["failure"] is not None:
                context = PolicyContext.from_failure(Failure.from_check(host, args["failure"]))
            elif args["service"]:
                context = PolicyContext(service=args["service"], init_service=args["service"])
            else:
                context = PolicyContext()
        except SentinelError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        verdicts, decision = evaluate_plan(args["commands"], context, policy)
        result.update(
            changed=False,
            verdicts=[verdict.to_dict() for verdict in verdicts],
            decision=decision.value,
            policy_version=policy.version,
            policy_file=policy.source,
        )
        return result
