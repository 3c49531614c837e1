# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.execute: runs stored plans a human approved, on their own host."""

from __future__ import annotations

import time
from typing import Any, Mapping, Sequence

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.sentinel.heal.plugins.module_utils._settle import DEFAULT_SETTLE_S
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import Planner
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import SentinelError
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.adapter import (
    blast_radius,
    check_ranges,
    executor_policy,
    privilege_for_host,
    service_check,
    step_executor,
    target_for_task,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.runner import TASK_STEP_PRIVILEGES
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.silences import hands_off, maintenance_windows
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard import approvals
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.host_approval import ApprovalSigner
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.secrets import known_secrets, redact
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Status
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.diagnose import flapping_reason
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import run_approved_plan
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.results import host_result
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import LIMIT_OPTION_RANGES, Toolkit
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import MEMORY_OPTIONS, Memory, memory_secrets

ARGUMENT_SPEC = dict(
    plan_ids=dict(type="list", elements="str", required=True),
    approved_by=dict(type="str", required=True),
    approval_key=dict(type="path", default=""),
    state_dir=dict(type="path", default="~/.local/state/sentinel-heal"),
    **MEMORY_OPTIONS,
    policy=dict(type="path"),
    verify_retries=dict(type="int", default=3),
    verify_delay=dict(type="float", default=2.0),
    settle_seconds=dict(type="float", default=DEFAULT_SETTLE_S),
    step_timeout=dict(type="int", default=120),
    step_privilege=dict(type="str", default="become", choices=list(TASK_STEP_PRIVILEGES)),
    redact_values=dict(type="list", elements="str", default=[], no_log=True),
    flap_limit=dict(type="int", default=3),
    flap_window=dict(type="int", default=3600),
    max_running=dict(type="int", default=0),
    max_hosts_per_run=dict(type="int", default=0),
    max_attempts_per_run=dict(type="int", default=0),
    max_fail_percentage=dict(type="int"),
    incident_timeout=dict(type="int", default=600),
    maintenance_windows=dict(type="list", elements="dict", default=[]),
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC)
        check_ranges(args, LIMIT_OPTION_RANGES)
        if not args["approved_by"].strip():
            raise AnsibleActionFail("approved_by: name who approves (it is recorded with the plan and the episode)")
        try:
            with privilege_for_host(self, args, task_vars) as resolved:
                return self._run_approved(result, resolved, task_vars)
        except SentinelError as exc:
            raise AnsibleActionFail(str(exc)) from exc

    def _run_approved(self, result: dict[str, Any], args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        host = task_vars.get("inventory_hostname", "localhost")
        secrets = known_secrets(task_vars, [*args["redact_values"], *memory_secrets(args)])
        try:
            # the executor on the host runs a plan the policy sends to a person only with the person's signature
            signer = ApprovalSigner.from_options(args["approval_key"], args["approved_by"]) \
                if args["approval_key"] and args["step_privilege"] == "executor" else None
            windows = maintenance_windows(args["maintenance_windows"], "maintenance_windows")
            with Memory.from_options(args) as memory:
                stored_plans = [approvals.load(memory, plan_id) for plan_id in args["plan_ids"]]
                policies = {stored.plan_id: load_policy(args["policy"] or stored.policy_file or None) for stored in stored_plans}
                # Every plan is checked before any runs: one refusal and nothing runs.
                verdicts = {stored.plan_id: approvals.authorize(stored, host=host, policy=policies[stored.plan_id]) for stored in stored_plans}
                if self._task.check_mode:
                    result.update(changed=bool(stored_plans), status=Status.PLANNED.value if stored_plans else Status.HEALTHY.value,
                                  plans=[stored.summary() for stored in stored_plans])
                    return result
                thrown = memory.suspended_because()
                if thrown is not None:
                    raise approvals.ApprovalRefused(
                        f"autonomous remediation is {thrown}: no approved plan runs while it is suspended",
                        field="plan_ids", value=[stored.plan_id for stored in stored_plans],
                        hint="the plans stay pending: resume (sentinel.heal.suspension state=absent), then approve them again")
                # the host's maintenance marker, as it is now: a person may have left one since the plan was stored
                marker = service_check(self, [stored.failure.spec for stored in stored_plans], task_vars, secrets,
                                       executor_policy=executor_policy(args, policies[stored_plans[0].plan_id]) if stored_plans else "",
                                       )["facts"].get("maintenance")
                for stored in stored_plans:
                    now = time.time()
                    silenced = hands_off(memory.silence_over(host, task_vars.get("group_names") or (), stored.failure.service, at=now),
                                         marker, windows, stored.failure.service, now, host)
                    if silenced is not None:
                        raise approvals.ApprovalRefused(
                            f"plan {stored.plan_id} does not run: {stored.failure.service} on {host}: {silenced.describe(now)}", field="plan_ids",
                            value=stored.plan_id, hint="the plan stays pending: approve it again once the silence ends or is lifted")
                    flapping = flapping_reason(memory, host, stored.failure.service, limit=args["flap_limit"], window=args["flap_window"],
                                               now=time.time())
                    if flapping is not None:
                        raise approvals.ApprovalRefused(
                            f"plan {stored.plan_id} does not run: {flapping}", field="plan_ids", value=stored.plan_id,
                            hint="the plan stays pending: approve it again once the window has passed or the count was reset")
                outcomes = []
                for stored in stored_plans:
                    if not memory.claim_plan(stored.plan_id, by=args["approved_by"], at=time.time()):
                        raise approvals.ApprovalRefused(f"plan {stored.plan_id} was decided by someone else meanwhile",
                                                        field="plan_id", value=stored.plan_id)
                    tools = self._tools(memory, policies[stored.plan_id], args, host, task_vars, secrets, signer)
                    outcomes.append(run_approved_plan(stored, verdicts[stored.plan_id], args["approved_by"], tools))
        except SentinelError as exc:
            raise AnsibleActionFail(redact(str(exc), secrets)) from exc
        result.update(redact(host_result(host, outcomes, check_mode=False), secrets))
        return result

    def _tools(self, memory: Memory, policy: Any, args: Mapping[str, Any], host: str, task_vars: dict[str, Any],
               secrets: Sequence[str], signer: ApprovalSigner | None) -> Toolkit:
        radius = blast_radius(args, task_vars)
        return Toolkit(
            planner=Planner(RunbookLibrary(()), memory),
            policy=policy,
            executor=step_executor(args, secrets, radius),
            target=target_for_task(host, self._connection, task_vars, self._templar),
            verify=lambda spec: service_check(self, [spec], task_vars, secrets, settle_seconds=args["settle_seconds"],
                                              executor_policy=executor_policy(args, policy))["services"][0],
            memory=memory,
            verify_retries=args["verify_retries"],
            verify_wait=args["verify_delay"],
            suspension=memory.suspended_because,
            blast_radius=radius,
            incident_timeout=args["incident_timeout"],
            approval_signer=signer,
            repairs_without_following_links=args["step_privilege"] == "executor",
        )
