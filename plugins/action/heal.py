# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.heal: adapts a task to the heal loop in plugin_utils.loop."""

from __future__ import annotations

import functools
import getpass
import json
import os
import time
from pathlib import Path
from typing import Any, Mapping, Sequence

from ansible.errors import AnsibleActionFail, AnsiblePromptInterrupt, AnsiblePromptNoninteractive
from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.sentinel.heal.plugins.module_utils._probe import SERVICE_OPTIONS
from ansible_collections.sentinel.heal.plugins.module_utils._text import printable
from ansible_collections.sentinel.heal.plugins.plugin_utils.adapter import (
    HostEvidence,
    blast_radius,
    check_ranges,
    executor_policy,
    inventory_hosts,
    service_check,
    step_executor,
    target_for_task,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.embeddings import EMBEDDINGS_OPTION, embedder_from_options
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.investigation import MAX_ROUNDS
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.knowledge import KNOWLEDGE_DIR, SharedKnowledge
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.llm import READ_FORMS, SCHEMA_FORMS, LLMClient, LLMSettings
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import Planner
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import HostUnreachable, MemoryStoreError, SentinelError
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.approvals import DEFAULT_TTL_S
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.host_approval import ApprovalSigner
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.secrets import known_secrets, redact
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure, Plan, Status, Verdict
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.diagnose import evidence_ahead, flapping_reason
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import LIMIT_OPTION_RANGES, MODES, IncidentState, Toolkit
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.results import diff_of, host_result, interrupted_line
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.timeline import progress_line
from ansible_collections.sentinel.heal.plugins.plugin_utils.runner import STEP_PRIVILEGES, steps_started
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import MEMORY_OPTIONS, Memory, memory_exists, memory_secrets
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.silences import MaintenanceWindow, hands_off, maintenance_windows

display = Display()

# What planning needs: shared by heal, plan and diagnose.
PLANNING_SPEC: dict[str, Any] = dict(
    services=dict(type="list", elements="dict", required=True, options=SERVICE_OPTIONS),
    failures=dict(type="list", elements="dict"),
    facts=dict(type="dict", default={}),
    state_dir=dict(type="path", default="~/.local/state/sentinel-heal"),
    **MEMORY_OPTIONS,
    runbooks=dict(type="list", elements="path", default=[]),
    builtin_runbooks=dict(type="bool", default=True),
    policy=dict(type="path"),
    failed_ttl=dict(type="int", default=86400),
    log_lines=dict(type="int", default=20),
    redact_values=dict(type="list", elements="str", default=[], no_log=True),
    knowledge=dict(type="bool", default=True),
    embeddings=EMBEDDINGS_OPTION,
    llm=dict(
        type="dict",
        options=dict(
            model=dict(type="str", required=True),
            base_url=dict(type="str"),
            api_key=dict(type="str", no_log=True),
            timeout=dict(type="float", default=30.0),
            max_retries=dict(type="int", default=3),
            token_budget=dict(type="int", default=6000),
            json_mode=dict(type="bool", default=True),
            schema=dict(type="str", default="none", choices=list(SCHEMA_FORMS)),
            reads=dict(type="str", default="auto", choices=list(READ_FORMS)),
        ),
    ),
)

ARGUMENT_SPEC: dict[str, Any] = dict(
    PLANNING_SPEC,
    max_attempts=dict(type="int", default=3),
    verify_retries=dict(type="int", default=3),
    verify_delay=dict(type="float", default=2.0),
    step_timeout=dict(type="int", default=120),
    step_privilege=dict(type="str", default="become", choices=list(STEP_PRIVILEGES)),
    interactive_approval=dict(type="bool", default=True),
    approval_key=dict(type="path", default=""),
    approval_ttl=dict(type="int", default=DEFAULT_TTL_S),
    flap_limit=dict(type="int", default=3),
    flap_window=dict(type="int", default=3600),
    max_running=dict(type="int", default=0),
    max_hosts_per_run=dict(type="int", default=0),
    max_attempts_per_run=dict(type="int", default=0),
    max_fail_percentage=dict(type="int"),
    incident_timeout=dict(type="int", default=600),
    think_rounds=dict(type="int", default=MAX_ROUNDS),
    maintenance_windows=dict(type="list", elements="dict", default=[]),
    mode=dict(type="str", default="autonomous", choices=list(MODES)),
)

LIMITS = {"max_attempts": (1, 10), "verify_retries": (1, 30), "step_timeout": (1, 3600), "approval_ttl": (60, 30 * 86400),
          "failed_ttl": (0, 365 * 86400), **LIMIT_OPTION_RANGES}


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = True
    argument_spec: dict[str, Any] = ARGUMENT_SPEC
    _windows: tuple[MaintenanceWindow, ...] = ()
    _runbooks: RunbookLibrary | None = None

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        task_vars = task_vars or {}
        _validation, args = self.validate_argument_spec(argument_spec=self.argument_spec)
        check_ranges(args, LIMITS)
        host = task_vars.get("inventory_hostname", "localhost")
        try:
            llm_settings = llm_settings_from(args.get("llm"))
            api_key = [llm_settings.api_key] if llm_settings and llm_settings.api_key else []
            secrets = known_secrets(task_vars, [*args["redact_values"], *api_key, *memory_secrets(args)])
            # checked on every host, healthy ones too: a window that cannot be read is found before it is needed
            self._windows = maintenance_windows(args.get("maintenance_windows"), "maintenance_windows")
            failures = self._failures(host, args, task_vars, secrets)
            writes = self._writes()
            if not failures:
                result.update(redact(self._healthy(host, args, writes), secrets))
                return result
            memory = Memory.from_options(args) if writes else Memory.for_check_mode(
                args["state_dir"], url=args["memory_url"] or None, password=args["memory_password"])
            try:
                # a remediation of this host whose job died is recorded before anything else happens here
                interrupted = memory.reap_interrupted(at=time.time(), host=host, steps_started=steps_started) if writes and memory is not None else []
                tools = self._toolkit(args, task_vars, host, secrets, llm_settings, memory, writes)
                result.update(redact(_with_interrupted(self._handle(host, failures, tools), host, interrupted), secrets))
            finally:
                if memory is not None:
                    memory.close()
        except HostUnreachable as exc:
            result.update(unreachable=True, status=Status.UNREACHABLE.value, msg=str(exc))
        except SentinelError as exc:
            raise AnsibleActionFail(redact(str(exc), memory_secrets(args))) from exc
        return result

    def _healthy(self, host: str, args: Mapping[str, Any], writes: bool) -> dict[str, Any]:
        """A healthy host: nothing to heal, and only an existing memory is opened, to record what an earlier job left
        interrupted here; a memory that cannot be opened then is a warning, not a failure of a healthy host."""
        handled = self._handle(host, [], None)
        if not writes or not memory_exists(args["state_dir"], args["memory_url"]):
            return handled
        try:
            with Memory.from_options(args) as memory:
                interrupted = memory.reap_interrupted(at=time.time(), host=host, steps_started=steps_started)
        except MemoryStoreError as exc:
            handled["warnings"].append(f"remediations an earlier job left interrupted here were not looked for: {exc}")
            return handled
        return _with_interrupted(handled, host, interrupted)

    def _writes(self) -> bool:
        """Whether this action may run remediation and write memory (heal outside check mode)."""
        return not self._task.check_mode

    def _handle(self, host: str, failures: list[Failure], tools: Toolkit | None) -> dict[str, Any]:
        """What the action does with the failures (tools is None when there are none)."""
        outcomes = [heal_incident(failure, tools) for failure in failures if tools is not None]
        result = host_result(host, outcomes, check_mode=not self._writes())
        if self._task.diff:
            result["diff"] = diff_of(outcomes)
        return result

    def _toolkit(self, args: Mapping[str, Any], task_vars: dict[str, Any], host: str, secrets: Sequence[str],
                 llm_settings: LLMSettings | None, memory: Memory | None, writes: bool) -> Toolkit:
        library = self._library(args)
        knowledge = None
        store = Path(args["state_dir"]).expanduser() / KNOWLEDGE_DIR
        # retrieval grounds the LLM's prompt, and nothing else reads it; without writes only an existing store is read
        if llm_settings and args.get("knowledge") and (writes or store.exists()):
            knowledge = SharedKnowledge(store, embedder_from_options(args["embeddings"]), library, sync_runbooks=writes)
        planner = Planner(library, memory, llm=LLMClient(llm_settings) if llm_settings else None, knowledge=knowledge, secrets=secrets)
        radius = blast_radius(args, task_vars)
        privilege = args.get("step_privilege", "become")
        return Toolkit(
            planner=planner,
            policy=load_policy(args["policy"]),
            executor=step_executor(args, secrets, radius),
            # with the executor on the host, reads go to it one by one like steps: no module reads as root beside it
            evidence_executor=None if privilege == "executor" else HostEvidence(self, task_vars, secrets, privilege, args.get("step_timeout", 120)),
            target=target_for_task(host, self._connection, task_vars, self._templar),
            verify=lambda spec: service_check(self, [spec], task_vars, secrets, args["log_lines"],
                                              executor_policy=executor_policy(args, load_policy(args["policy"])))["services"][0],
            memory=memory if writes else None,  # the planner reads it either way: the plan shown is the real one
            check_mode=not writes,
            run_evidence=not self._task.check_mode,
            ask_approval=self._ask_operator if args.get("interactive_approval") else None,
            approval_signer=ApprovalSigner.from_options(args["approval_key"], getpass.getuser())
            if args.get("interactive_approval") and args.get("approval_key") and privilege == "executor" else None,
            approval_ttl=args.get("approval_ttl", DEFAULT_TTL_S),
            max_attempts=args.get("max_attempts", 1),
            verify_retries=args.get("verify_retries", 1),
            verify_wait=args.get("verify_delay", 0.0),
            failed_plan_ttl=args["failed_ttl"],
            probe_hosts=inventory_hosts(task_vars, self._templar),
            flap_limit=args.get("flap_limit", 3),
            flap_window=args.get("flap_window", 3600),
            blast_radius=radius,
            incident_timeout=args.get("incident_timeout", 600),
            think_rounds=args.get("think_rounds", MAX_ROUNDS),
            mode=args.get("mode", "autonomous"),
            suspension=memory.suspended_because if memory is not None else lambda: None,
            silence=functools.partial(_silence_of, memory, tuple(task_vars.get("group_names") or ()), self._windows),
            progress=functools.partial(_show_progress, args.get("max_attempts", 1)),
        )

    def _evidence_ahead(self, host: str, args: Mapping[str, Any], task_vars: dict[str, Any]) -> list[dict[str, Any]]:
        """The evidence commands for the check to read, none for a service the controller already knows the loop would
        not diagnose now: the kill switch, a silence or a declared window, the flapping limit (the host's maintenance
        marker, a masked unit and systemd's own restart the check itself knows)."""
        now = time.time()
        groups = tuple(task_vars.get("group_names") or ())
        planner, policy = Planner(self._library(args), None), load_policy(args["policy"])
        if not memory_exists(args["state_dir"], args["memory_url"]):
            return evidence_ahead(args["services"], planner, policy, host, lambda service: hands_off(None, None, self._windows, service, now))
        try:
            with Memory.from_options(args) as memory:
                suspended = memory.suspended_because()

                def held(service: str) -> str | None:
                    silenced = memory.silenced_because(host, groups, service, at=now)
                    return suspended or hands_off(silenced, None, self._windows, service, now) or flapping_reason(
                        memory, host, service, limit=args.get("flap_limit", 3), window=args.get("flap_window", 3600), now=now)

                return evidence_ahead(args["services"], planner, policy, host, held)
        except MemoryStoreError:
            # what memory says is not known: nothing is read ahead (a healthy host stays healthy; a failing one meets the
            # same error where the loop opens memory, with what to do)
            return []

    def _library(self, args: Mapping[str, Any]) -> RunbookLibrary:
        if self._runbooks is None:
            self._runbooks = RunbookLibrary.load(args["runbooks"], builtin=args["builtin_runbooks"])
        return self._runbooks

    def _failures(self, host: str, args: Mapping[str, Any], task_vars: dict[str, Any], secrets: Sequence[str]) -> list[Failure]:
        if args["failures"] is None:
            # a failing service's evidence is read in the check itself (outside check mode, as evidence is)
            on_host = executor_policy(args, load_policy(args["policy"]))
            ahead = self._evidence_ahead(host, args, task_vars) if self._writes() and not on_host else []
            checked = service_check(self, args["services"], task_vars, secrets, args["log_lines"], ahead,
                                    "become" if on_host else args.get("step_privilege", "become"), args.get("step_timeout", 120),
                                    executor_policy=on_host)
            raw_failures, facts = checked["failures"], checked.get("facts") or {}
        else:
            raw_failures, facts = redact(args["failures"], secrets), args["facts"]
        return [Failure.from_check(host, raw, facts) for raw in raw_failures]

    def _ask_operator(self, failure: Failure, plan: Plan, verdicts: Sequence[Verdict]) -> tuple[str, str] | None:
        """Ask at the terminal; None when there is no terminal (AWX, cron, CI): the plan then waits."""
        lines = [
            "",
            # what a model or a host wrote reaches the operator's terminal escaped, like the argv below
            printable(f"sentinel.heal: {failure.host}: {failure.service} ({failure.failure_class}): {failure.summary}"),
            printable(f"Plan from {plan.source.value} {plan.reference}: {plan.rationale}"),
        ]
        for number, verdict in enumerate(verdicts, start=1):
            as_root = " as root" if verdict.become else ""
            lines.append(printable(f"  {number}. argv {json.dumps(list(verdict.argv))}{as_root}   [{verdict.decision.value}: {verdict.reason}]"))
        lines.append(f"Run exactly these steps on {failure.host}? Type yes to approve, anything else denies: ")
        try:
            answer = display.prompt_until("\n".join(lines))
        except (AnsiblePromptNoninteractive, AnsiblePromptInterrupt):
            return None
        who = f"interactive:{getpass.getuser()}"
        return ("approved", who) if answer.strip().lower() in (b"yes", b"y") else ("denied", who)


def _silence_of(memory: Memory | None, groups: tuple[str, ...], windows: tuple[MaintenanceWindow, ...], failure: Failure) -> str | None:
    now = time.time()
    silenced = None if memory is None else memory.silenced_because(failure.host, groups, failure.service, at=now)
    return hands_off(silenced, failure.facts.get("maintenance"), windows, failure.service, now)


def _with_interrupted(handled: dict[str, Any], host: str, interrupted: list[dict[str, Any]]) -> dict[str, Any]:
    if interrupted:
        handled.update(interrupted=interrupted, summary=[interrupted_line(host, entry) for entry in interrupted] + handled["summary"])
    return handled


def llm_settings_from(options: Mapping[str, Any] | None) -> LLMSettings | None:
    """The task's llm options; the key comes from them or from OPENAI_API_KEY on the controller."""
    if not options or not options.get("model"):
        return None
    return LLMSettings(
        model=options["model"], base_url=options.get("base_url") or None,
        api_key=options.get("api_key") or os.environ.get("OPENAI_API_KEY") or None,
        timeout=options["timeout"], max_retries=options["max_retries"], token_budget=options["token_budget"],
        json_mode=options["json_mode"], schema=options["schema"], reads=options.get("reads") or "auto",
    )


def _show_progress(max_attempts: int, state: IncidentState, node: str) -> None:
    """Long work on the terminal, per host (the line comes from the worker, through Ansible's display queue)."""
    line = progress_line(state, node, max_attempts=max_attempts, now=time.time())
    if line is not None:
        display.display(line)
