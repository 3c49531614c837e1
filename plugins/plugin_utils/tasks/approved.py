"""The plans a person approved, run on their own host (sentinel.heal.execute, approve.yml): every plan checked before
any runs (one refusal and nothing runs), then each run as the loop runs a plan, under every limit a heal honours: the
kill switch, a silence or the host's maintenance marker as it is now, the flapping limit, and a claim no other approver
holds; once they ran, the people of ``notify`` told, as the heal tells them."""

from __future__ import annotations

import time
from typing import Any, Callable, Mapping, Sequence

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import Planner
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import SentinelError
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.adapter import (
    check_ranges,
    executor_policy,
    job_of,
    privilege_for_host,
    service_check,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.kill_switch import KillSwitch
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.silences import MaintenanceWindow, Silences, hands_off, maintenance_windows
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard import approvals
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.host_approval import ApprovalSigner
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.secrets import known_secrets, redact
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Status
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.diagnose import flapping_reason
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import run_approved_plan
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.options import EXECUTE_SPEC, LIMITS
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.results import host_result
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import TaskContext, Toolkit
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.destinations import Destination, destinations_from
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.messages import notices_of
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.sending import tell
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory, memory_secrets
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.notifying import warn_on_incidents, with_notifications

display = Display()


class ApprovedPlansAction(ActionBase):
    """The action of sentinel.heal.execute."""

    TRANSFERS_FILES = False
    _requires_connection = True
    argument_spec: dict[str, Any] = EXECUTE_SPEC

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        _validation, args = self.validate_argument_spec(argument_spec=self.argument_spec)
        check_ranges(args, LIMITS)
        if not args["approved_by"].strip():
            raise AnsibleActionFail("approved_by: name who approves (it is recorded with the plan and the episode)")
        task = TaskContext(action=self, connection=self._connection, templar=self._templar, task_vars=task_vars,
                           check_mode=bool(self._task.check_mode), diff=bool(self._task.diff), ask_operator=lambda *_: None,
                           show=display.display)
        try:
            with privilege_for_host(self, args, task_vars) as resolved:
                result.update(run_approved(resolved, task))
                return result
        except SentinelError as exc:
            raise AnsibleActionFail(str(exc)) from exc


def run_approved(args: Mapping[str, Any], task: TaskContext) -> dict[str, Any]:
    """The task's result for the approved plans ``args["plan_ids"]`` on the task's host; a plan that may not run fails
    the task (ApprovalRefused) with what to do, and leaves every plan pending."""
    host, task_vars = task.host, task.task_vars
    secrets = known_secrets(task_vars, [*args["redact_values"], *memory_secrets(args)])
    try:
        # the executor on the host runs a plan the policy sends to a person only with the person's signature
        signer = ApprovalSigner.from_options(args["approval_key"], args["approved_by"]) \
            if args["approval_key"] and args["step_privilege"] == "executor" else None
        windows = maintenance_windows(args["maintenance_windows"], "maintenance_windows")
        destinations = destinations_from(args["notify"])
        with Memory.from_options(args) as memory:
            stored_plans = [approvals.load(memory, plan_id) for plan_id in args["plan_ids"]]
            policies = {stored.plan_id: load_policy(args["policy"] or stored.policy_file or None) for stored in stored_plans}
            # Every plan is checked before any runs: one refusal and nothing runs.
            verdicts = {stored.plan_id: approvals.authorize(stored, host=host, policy=policies[stored.plan_id]) for stored in stored_plans}
            if task.check_mode:
                return {"changed": bool(stored_plans), "status": Status.PLANNED.value if stored_plans else Status.HEALTHY.value,
                        "plans": [stored.summary() for stored in stored_plans]}
            thrown = KillSwitch(memory.database).suspended_because()
            if thrown is not None:
                raise approvals.ApprovalRefused(
                    f"autonomous remediation is {thrown}: no approved plan runs while it is suspended",
                    field="plan_ids", value=[stored.plan_id for stored in stored_plans],
                    hint="the plans stay pending: resume (sentinel.heal.suspension state=absent), then approve them again")
            # the host's maintenance marker, as it is now: a person may have left one since the plan was stored
            marker = service_check(task.action, [stored.failure.spec for stored in stored_plans], task_vars, secrets,
                                   executor_policy=executor_policy(args, policies[stored_plans[0].plan_id]) if stored_plans else "",
                                   )["facts"].get("maintenance")
            for stored in stored_plans:
                _refuse_held(stored, memory, args, task, marker, windows)

            def tools_of(stored: approvals.StoredPlan) -> Toolkit:
                return Toolkit.from_options(args, task, planner=Planner(RunbookLibrary(()), memory), policy=policies[stored.plan_id],
                                            memory=memory, secrets=secrets, approval_signer=signer)

            return carry_out(stored_plans, verdicts, memory, tools_of, args, task, destinations, secrets)
    except SentinelError as exc:
        raise AnsibleActionFail(redact(str(exc), secrets)) from exc


def carry_out(stored_plans: Sequence[approvals.StoredPlan], verdicts: Mapping[str, Any], memory: Memory,
              tools_of: Callable[[approvals.StoredPlan], Toolkit], args: Mapping[str, Any], task: TaskContext,
              destinations: Sequence[Destination], secrets: Sequence[str]) -> dict[str, Any]:
    """The checked plans, each claimed and run with the tools ``tools_of`` gives it, then the people told: that a person
    approved it (on call, an acknowledgement of the page its wait opened, under the incident's key), then how it ended
    (resolved, or escalated with what was tried), each naming who approved. Told once every plan ran, so that a
    destination that is slow or down never holds a plan back; what was not delivered is a warning, never an error."""
    outcomes = []
    for stored in stored_plans:
        if not memory.claim_plan(stored.plan_id, by=args["approved_by"], at=time.time()):
            raise approvals.ApprovalRefused(f"plan {stored.plan_id} was decided by someone else meanwhile", field="plan_id", value=stored.plan_id)
        outcomes.append(run_approved_plan(stored, verdicts[stored.plan_id], args["approved_by"], tools_of(stored)))
    # no plan run here ever ends waiting for a person: the time a wait would last says nothing
    notices = notices_of(outcomes, approval_ttl=0, now=time.time())
    deliveries = tell(destinations, notices, state_dir=args["state_dir"], job=job_of(task.task_vars), secrets=secrets)
    warnings = warn_on_incidents(outcomes, deliveries)
    return redact(with_notifications(host_result(task.host, outcomes, check_mode=False), deliveries, warnings), secrets)


def _refuse_held(stored: approvals.StoredPlan, memory: Memory, args: Mapping[str, Any], task: TaskContext,
                 marker: Mapping[str, Any] | None, windows: Sequence[MaintenanceWindow]) -> None:
    """A plan whose service a silence, the maintenance marker or a window holds, or that the flapping limit stops, does
    not run (ApprovalRefused): the plan stays pending."""
    now, host = time.time(), task.host
    silenced = hands_off(Silences(memory.database).silence_over(host, task.task_vars.get("group_names") or (), stored.failure.service, at=now),
                         marker, windows, stored.failure.service, now, host)
    if silenced is not None:
        raise approvals.ApprovalRefused(
            f"plan {stored.plan_id} does not run: {stored.failure.service} on {host}: {silenced.describe(now)}", field="plan_ids",
            value=stored.plan_id, hint="the plan stays pending: approve it again once the silence ends or is lifted")
    flapping = flapping_reason(memory, host, stored.failure.service, limit=args["flap_limit"], window=args["flap_window"], now=time.time())
    if flapping is not None:
        raise approvals.ApprovalRefused(
            f"plan {stored.plan_id} does not run: {flapping}", field="plan_ids", value=stored.plan_id,
            hint="the plan stays pending: approve it again once the window has passed or the count was reset")
