"""The action plugin of a task that takes failures through the heal loop (heal; plan and diagnose, which stop before
anything runs): the task's options checked where a person wrote them, the Ansible side of the task handed to its
session (tasks/heal.py, tasks/planning.py), and a person at the terminal asked whether a plan may run."""

from __future__ import annotations

import getpass
import json
import os
from typing import Any, Sequence

from ansible.errors import AnsibleActionFail, AnsiblePromptInterrupt, AnsiblePromptNoninteractive
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.sentinel.heal.plugins.module_utils._text import printable
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import SentinelError
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure, Plan, Status, Verdict, as_link
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.options import list_option_errors_of_task
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import TaskContext
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.heal import HealSession, error_message, parse_shipped_files

display = Display()
# set by ansible-runner in every job it runs (AWX, Event-Driven Ansible, ansible-navigator)
RUNNER_JOB_VARIABLE = "AWX_ISOLATED_DATA_DIR"


parse_shipped_files()  # here, as the action loads in the play's process, before it forks the workers that run it


class LoopAction(ActionBase):
    """``argument_spec``: the task's options; ``session``: what takes its failures through the loop."""

    TRANSFERS_FILES = False
    _requires_connection = True
    argument_spec: dict[str, Any] = {}
    session: type[HealSession] = HealSession

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        role = self._task._role.get_name() if self._task._role else None
        entry_errors = list_option_errors_of_task(self.argument_spec, self._task.args, role)
        if entry_errors:
            raise AnsibleActionFail("; ".join(entry_errors))
        _validation, args = self.validate_argument_spec(argument_spec=self.argument_spec)
        task = TaskContext(action=self, connection=self._connection, templar=self._templar, task_vars=task_vars or {},
                           check_mode=self._task.check_mode, diff=self._task.diff, ask_operator=self._ask_operator, show=display.display)
        try:
            result.update(self.session(args, task).run())
        except SentinelError as exc:
            raise AnsibleActionFail(error_message(args, exc)) from exc
        if result.get("status") == Status.ESCALATED.value:
            # a service it was asked to heal stays down: the task fails, as the role's summary fails the host
            result.update(failed=True, msg="; ".join(result.get("summary") or ()) or "a service stays down")
        return result

    def _ask_operator(self, failure: Failure, plan: Plan, verdicts: Sequence[Verdict]) -> tuple[str, str] | None:
        """Ask at the terminal; None when there is no terminal (cron, CI) or the job runs under ansible-runner: the plan
        then waits for approve.yml."""
        if RUNNER_JOB_VARIABLE in os.environ:
            # ansible-runner gives the job a pseudo-terminal that answers only the prompts of its `passwords` map: nobody
            # reads this one, and the job would wait on it until its timeout
            return None
        try:
            answer = display.prompt_until("\n".join(approval_prompt(failure, plan, verdicts)))
        except (AnsiblePromptNoninteractive, AnsiblePromptInterrupt):
            return None
        who = f"interactive:{getpass.getuser()}"
        return ("approved", who) if answer.strip().lower() in (b"yes", b"y") else ("denied", who)


def approval_prompt(failure: Failure, plan: Plan, verdicts: Sequence[Verdict]) -> list[str]:
    """The lines a person at the terminal reads before saying whether the plan may run: what a model or a host wrote
    reaches the terminal escaped, like the argv."""
    lines = [
        "",
        printable(f"sentinel.heal: {failure.host}: {failure.service} ({failure.failure_class}): {failure.summary}"),
        printable(f"Plan from {plan.source.value} {plan.reference}: {plan.rationale}"),
    ]
    for number, verdict in enumerate(verdicts, start=1):
        as_root = " as root" if verdict.become else ""
        lines.append(printable(f"  {number}. argv {json.dumps(list(verdict.argv))}{as_root}   [{verdict.decision.value}: {verdict.reason}]"))
    for restore in failure.puts_back(plan):
        kept = f"kept on the host, sha256 {restore['sha256'][:12]}"
        lines.append(printable(f"  Puts back the last known good {restore['path']}{as_link(restore)} ({kept}):"))
        shown = restore["diff"].splitlines() or ["(no diff to show: the file is not text, or larger than the host shows)"]
        lines += [printable(f"    {line}") for line in shown]
    lines.append(f"Run exactly these steps on {failure.host}? Type yes to approve, anything else denies: ")
    return lines
