"""One heal task on one host, from its checked options to its result: the services checked (with the evidence the loop
will want, read in the same module call), what an earlier job left interrupted on the host recorded first, each failure
taken through the loop with the tools its options name, and the result shaped for the task. The action plugin gives
it the Ansible side of the task (:class:`TaskContext`, through tasks/loop_action.py) and does nothing else."""

from __future__ import annotations

import contextlib
import functools
import getpass
import time
from pathlib import Path
from typing import Any, Callable, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.embeddings import embedder_from_options
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.investigation import MAX_ROUNDS
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.knowledge import KNOWLEDGE_DIR, SharedKnowledge
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.llm import LLMClient, LLMSettings
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import Planner
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import HostUnreachable, MemoryStoreError, SentinelError
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.adapter import (
    HostEvidence,
    InventoryHosts,
    check_ranges,
    executor_policy,
    job_of,
    privilege_for_host,
    service_check,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.runner import steps_started
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import (
    FleetIncident,
    FleetIncidents,
    FleetSettings,
    FleetView,
    counted,
    see,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.kill_switch import KillSwitch
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.leases import Leases
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.silences import MaintenanceWindow, Silences, hands_off, maintenance_windows
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.approvals import DEFAULT_TTL_S
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.host_approval import ApprovalSigner
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.secrets import known_secrets, redact
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure, Hold, Status
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.dependencies import check_depends_on, dependencies_first, with_what_they_need
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.diagnose import evidence_ahead, flapping_reason
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.options import LIMITS, llm_settings_from
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.relapse import DEFAULT_RELAPSE_WINDOW_S
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.results import diff_of, host_result, interrupted_line, with_enforcement
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import DependencyOutcome, IncidentOutcome, IncidentState, TaskContext, Toolkit
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.destinations import destinations_from
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.links import signer_from
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.messages import fleet_notice, notices_of, with_approvals
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.said import SaidOnce
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.sending import Delivery, tell
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.footing import check_state_dir
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory, memory_exists, memory_secrets
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.notifying import warn_on_incidents, with_notifications

# an incident that takes longer than this shows, per host, which attempt and node it is in as it enters each node
LONG_WORK_S = 5.0


class HealSession:
    """The heal task: outside check mode it runs what the policy allows and writes the memory; :meth:`handle` makes
    the task's result from the loop's outcomes (plan and diagnose, which never write, shape theirs)."""

    def __init__(self, args: Mapping[str, Any], task: TaskContext) -> None:
        check_ranges(args, LIMITS)
        check_depends_on(args["services"])
        self.fleet = FleetSettings.from_options(args)
        self.args, self.task = args, task
        # what this task checks and heals: the services it targets and those they need (all, when it targets none)
        self.services = with_what_they_need(args["services"], args.get("target_services") or [])
        self.destinations = destinations_from(args.get("notify"))
        self.links = signer_from(args)
        self._secrets: Sequence[str] = ()
        self._windows: tuple[MaintenanceWindow, ...] = ()
        self._runbooks: RunbookLibrary | None = None
        self._facts: Mapping[str, Any] = {}

    @property
    def writes(self) -> bool:
        """Whether the session may run remediation and write memory (heal outside check mode)."""
        return not self.task.check_mode

    def run(self) -> dict[str, Any]:
        """The task's result; a SentinelError says what to fix (:meth:`message`)."""
        asked = self.args.get("step_privilege", "become")
        try:
            with privilege_for_host(self.task.action, self.args, self.task.task_vars) as resolved:
                self.args = resolved
                return with_enforcement(self._checked_and_healed(), self.task.host, asked, resolved.get("step_privilege", "become"),
                                        self._facts.get("enforcement"))
        except HostUnreachable as exc:
            return {"unreachable": True, "status": Status.UNREACHABLE.value, "msg": str(exc)}

    def _checked_and_healed(self) -> dict[str, Any]:
        args, host = self.args, self.task.host
        try:
            llm_settings = llm_settings_from(args.get("llm"))
            # checked on every host, healthy ones too: a state dir that cannot serve is found before a service needs it
            check_state_dir(args["state_dir"], sqlite=not args["memory_url"], writes=self.writes)
            api_key = [llm_settings.api_key] if llm_settings and llm_settings.api_key else []
            secrets = known_secrets(self.task.task_vars, [*args["redact_values"], *api_key, *memory_secrets(args)])
            self._secrets = secrets
            # checked on every host, healthy ones too: a window that cannot be read is found before it is needed
            self._windows = maintenance_windows(args.get("maintenance_windows"), "maintenance_windows")
            failures = self._failures(secrets)
            if not failures:
                return redact(self._healthy(), secrets)
            memory = Memory.from_options(args) if self.writes else Memory.for_check_mode(
                args["state_dir"], url=args["memory_url"] or None, password=args["memory_password"])
            try:
                # a remediation of this host whose job died is recorded before anything else happens here
                interrupted = Leases(memory.database).reap_interrupted(at=time.time(), host=host, steps_started=steps_started) \
                    if self.writes and memory is not None else []
                tools = self._toolkit(secrets, llm_settings, memory)
                fleet = self._fleet_view(memory, failures, tools) if self.writes and memory is not None else FleetView()
                return redact(_with_interrupted(self.handle(failures, tools, fleet), host, interrupted), secrets)
            finally:
                if memory is not None:
                    memory.close()
        except HostUnreachable as exc:
            return {"unreachable": True, "status": Status.UNREACHABLE.value, "msg": str(exc)}

    def handle(self, failures: list[Failure], tools: Toolkit | None, fleet: FleetView | None = None) -> dict[str, Any]:
        """The task's result from the failures (``tools`` is None when there are none), each taken through the loop as
        part of the fleet incident ``fleet`` says it is in, if any."""
        return self._handled(failures, tools, fleet or FleetView(), tools.memory if tools is not None else None)

    def _handled(self, failures: list[Failure], tools: Toolkit | None, fleet: FleetView, memory: Memory | None) -> dict[str, Any]:
        """:meth:`handle`, the people told with the ``memory`` open that marks what was said once."""
        outcomes: list[IncidentOutcome] = []
        closed = list(fleet.closed)
        if tools is not None:
            ended: dict[str, DependencyOutcome] = {}
            for failure, needs in dependencies_first(failures):
                outcomes.append(heal_incident(failure, tools, [ended[name] for name in needs], fleet.incidents.get(failure.service)))
                ended[failure.service] = DependencyOutcome(failure.service, outcomes[-1].state.status, outcomes[-1].state.reason)
            # every heal, not only a fleet incident's: another job (a slice on another node, a later batch) may have opened
            # one with this host in it after this host's check
            closed += _clear_healed(tools, outcomes)
        deliveries = self._notify(outcomes, list(fleet.incidents.values()), closed, tools, memory)
        warnings = warn_on_incidents(outcomes, deliveries)
        result = with_notifications(host_result(self.task.host, outcomes, check_mode=not self.writes, fleet_closed=closed), deliveries, warnings)
        if self.task.diff:
            result["diff"] = diff_of(outcomes)
        return result

    def _notify(self, outcomes: Sequence[IncidentOutcome], opened: Sequence[FleetIncident], closed: Sequence[FleetIncident],
                tools: Toolkit | None, memory: Memory | None) -> list[Delivery]:
        """The people told of what this host's incidents came to, once their outcomes are final (a waiting plan's message
        with its approval link), and of the fleet incidents its check opened or closed - by the first host to get there of
        every job, controller and node that shares the memory (notify/said.py): one message for them all; never in check
        mode, never an error of the heal."""
        if not self.writes or not self.destinations:
            return []
        now = time.time()
        notices = notices_of(outcomes, approval_ttl=self.args.get("approval_ttl", DEFAULT_TTL_S), now=now)
        if tools is not None:
            notices = with_approvals(notices, outcomes, approvable_from_chat=tools.policy.approvable_from_chat, signer=self.links,
                                     plan=functools.partial(_waiting_plan, tools.memory))
        if memory is not None:  # a fleet incident is the memory's (none without one), and so is who said it first
            said = SaidOnce(memory.database)
            notices += [fleet_notice(incident, opened=True, now=now) for incident in {i.id: i for i in opened}.values()
                        if _first_to_say(said, f"fleet-{incident.id}-opened", now)]
            notices += [fleet_notice(incident, opened=False, now=now) for incident in closed
                        if _first_to_say(said, f"fleet-{incident.id}-closed", now)]
        return tell(self.destinations, notices, state_dir=self.args["state_dir"], job=job_of(self.task.task_vars), secrets=self._secrets)

    def _fleet_view(self, memory: Memory, failures: list[Failure], tools: Toolkit) -> FleetView:
        """This host's check told to the other hosts of its run, and which fleet incident each failure is part of."""
        failing = {failure.service for failure in failures}
        clear = [spec["name"] for spec in self.services if spec["name"] not in failing]
        batch = self.task.task_vars.get("ansible_play_batch") or [self.task.host]
        return see(FleetIncidents(memory.database), self.task.host, counted(failures, tools.silence), clear, self.fleet,
                   run_id=tools.blast_radius.run_id, run_hosts=tools.blast_radius.run_hosts, batch_hosts=len(batch), at=time.time())

    def _healthy(self) -> dict[str, Any]:
        """A healthy host: nothing to heal, and only an existing memory is opened, to record what an earlier job left
        interrupted here and the end of the fleet incidents it was part of; a memory that passed the state dir's check
        (:func:`check_state_dir`) and still cannot be opened now (another job holds its lock, its server is down) is a
        warning, not a failure of a healthy host."""
        args = self.args
        if not self.writes or not memory_exists(args["state_dir"], args["memory_url"]):
            return self.handle([], None)
        try:
            with Memory.from_options(args) as memory:
                interrupted = Leases(memory.database).reap_interrupted(at=time.time(), host=self.task.host, steps_started=steps_started)
                closed = FleetIncidents(memory.database).clear_fleet_incidents(self.task.host, [spec["name"] for spec in self.services],
                                                                               at=time.time())
                handled = self._handled([], None, FleetView(closed=tuple(closed)), memory)
        except MemoryStoreError as exc:
            handled = self.handle([], None)
            handled["warnings"].append(f"remediations an earlier job left interrupted here were not looked for: {exc}")
            return handled
        return _with_interrupted(handled, self.task.host, interrupted)

    def _toolkit(self, secrets: Sequence[str], llm_settings: LLMSettings | None, memory: Memory | None) -> Toolkit:
        args, task, writes = self.args, self.task, self.writes
        library = self._library()
        knowledge = None
        store = Path(args["state_dir"]).expanduser() / KNOWLEDGE_DIR
        # retrieval grounds the LLM's prompt, and nothing else reads it; without writes only an existing store is read
        if llm_settings and args.get("knowledge") and (writes or store.exists()):
            knowledge = SharedKnowledge(store, embedder_from_options(args["embeddings"]), library, sync_runbooks=writes)
        planner = Planner(library, memory, llm=LLMClient(llm_settings) if llm_settings else None, knowledge=knowledge, secrets=secrets)
        privilege = args.get("step_privilege", "become")
        signer = ApprovalSigner.from_options(args["approval_key"], getpass.getuser()) \
            if args.get("interactive_approval") and args.get("approval_key") and privilege == "executor" else None
        return Toolkit.from_options(
            # the planner reads the memory either way: the plan shown is the real one
            args, task, planner=planner, policy=load_policy(args["policy"]), memory=memory, secrets=secrets, approval_signer=signer,
            writes=writes,
            # with the executor on the host, reads go to it one by one like steps: no module reads as root beside it
            evidence_executor=None if privilege == "executor" else HostEvidence(task.action, task.task_vars, secrets, privilege,
                                                                                args.get("step_timeout", 120)),
            run_evidence=not task.check_mode,
            ask_approval=task.ask_operator if args.get("interactive_approval") else None,
            approval_ttl=args.get("approval_ttl", DEFAULT_TTL_S),
            max_attempts=args.get("max_attempts", 1),
            failed_plan_ttl=args["failed_ttl"],
            probe_hosts=InventoryHosts(task.task_vars, task.templar),
            relapse_window=args.get("relapse_window", DEFAULT_RELAPSE_WINDOW_S),
            think_rounds=args.get("think_rounds", MAX_ROUNDS),
            mode=args.get("mode", "autonomous"),
            silence=functools.partial(_silence_of, memory, tuple(task.task_vars.get("group_names") or ()), self._windows),
            progress=functools.partial(_show_progress, task.show, args.get("max_attempts", 1)),
        )

    def _evidence_ahead(self) -> list[dict[str, Any]]:
        """The evidence commands for the check to read, none for a service the controller already knows the loop would
        not diagnose now: the kill switch, a silence or a declared window, the flapping limit (the host's maintenance
        marker, a masked unit and systemd's own restart the check itself knows)."""
        args, host, now = self.args, self.task.host, time.time()
        groups = tuple(self.task.task_vars.get("group_names") or ())
        planner, policy = Planner(self._library(), None), load_policy(args["policy"])
        if not memory_exists(args["state_dir"], args["memory_url"]):
            return evidence_ahead(self.services, planner, policy, host,
                                  lambda service: _said(hands_off(None, None, self._windows, service, now, host), now))
        try:
            with Memory.from_options(args) as memory:
                suspended = KillSwitch(memory.database).suspended_because()

                def held(service: str) -> str | None:
                    silenced = Silences(memory.database).silence_over(host, groups, service, at=now)
                    return suspended or _said(hands_off(silenced, None, self._windows, service, now, host), now) or flapping_reason(
                        memory, host, service, limit=args.get("flap_limit", 3), window=args.get("flap_window", 3600), now=now)

                return evidence_ahead(self.services, planner, policy, host, held)
        except MemoryStoreError:
            # what memory says is not known: nothing is read ahead (a healthy host stays healthy; a failing one meets the
            # same error where the loop opens memory, with what to do)
            return []

    def _library(self) -> RunbookLibrary:
        if self._runbooks is None:
            self._runbooks = RunbookLibrary.load(self.args["runbooks"], builtin=self.args["builtin_runbooks"])
        return self._runbooks

    def _failures(self, secrets: Sequence[str]) -> list[Failure]:
        args, task_vars = self.args, self.task.task_vars
        if args["failures"] is None:
            # a failing service's evidence is read in the check itself (outside check mode, as evidence is: diagnose
            # and plan, which write nothing, read it too)
            on_host = executor_policy(args, load_policy(args["policy"]))
            ahead = [] if self.task.check_mode else self._evidence_ahead()
            checked = service_check(self.task.action, self.services, task_vars, secrets, args["log_lines"], ahead,
                                    "become" if on_host else args.get("step_privilege", "become"), args.get("step_timeout", 120),
                                    executor_policy=on_host)
            raw_failures, facts = checked["failures"], checked.get("facts") or {}
        else:
            raw_failures, facts = redact(args["failures"], secrets), args["facts"]
        self._facts = facts
        # the executor on the host puts a last known good file back, or the module known_good_restore as root (become):
        # a sudo rule cannot bind a restore to the incident's file and copy, so with sudo none is planned
        setting = args.get("restore_known_good") or "approve" if args.get("step_privilege", "become") != "sudo" else "off"
        if args.get("step_privilege") == "executor" and args["failures"] is None:
            # the executor's check says the host's own setting: the stricter of the two holds, both sides plan alike
            mine = {spec["name"]: spec.get("restore_known_good") or setting for spec in self.services}
            return [Failure.from_check(self.task.host, _stricter_restore(raw, mine.get(raw.get("name"), setting)), facts) for raw in raw_failures]
        return [Failure.from_check(self.task.host, _restore_setting(raw, setting, force=setting == "off"), facts) for raw in raw_failures]


def parse_shipped_files() -> None:
    """Parse the shipped policy and runbooks in this process, for the processes it forks: Ansible loads the heal action
    in the play's own process before it forks a worker per host, so each worker finds them parsed instead of parsing them
    again (at 100 hosts, 100 parses: half of a healthy host's time on the controller). A file that does not parse, or a
    library a runbook's conditions need that is not installed, is left for the session to report, with what to do."""
    with contextlib.suppress(SentinelError, ImportError):
        load_policy()
        RunbookLibrary.load()


def error_message(args: Mapping[str, Any], exc: SentinelError) -> str:
    """What the task says of an error: never a password of the memory's."""
    return redact(str(exc), memory_secrets(args))


# how a restore of the last known good configuration may run, the strictest first
RESTORE_SETTINGS_STRICTEST_FIRST = ("off", "approve", "auto")


def _stricter_restore(raw: Mapping[str, Any], controller_setting: str) -> Mapping[str, Any]:
    """A failure the executor checked, its restore setting the stricter of the host's (its check's spec says it; a host
    whose role predates that says nothing, and its default is approve) and the controller's."""
    spec = raw.get("spec")
    if not isinstance(spec, Mapping):
        return raw
    host_setting = spec.get("restore_known_good") or "approve"
    chosen = min(host_setting, controller_setting, key=RESTORE_SETTINGS_STRICTEST_FIRST.index)
    return dict(raw, spec=dict(spec, restore_known_good=chosen))


def _restore_setting(raw: Mapping[str, Any], setting: str, *, force: bool) -> Mapping[str, Any]:
    """A failure whose service does not say how a restore of its last known good configuration runs (or, ``force``,
    whatever it says): as the heal says."""
    spec = raw.get("spec")
    if not isinstance(spec, Mapping) or (spec.get("restore_known_good") and not force):
        return raw
    return dict(raw, spec=dict(spec, restore_known_good=setting))


def _silence_of(memory: Memory | None, groups: tuple[str, ...], windows: tuple[MaintenanceWindow, ...], failure: Failure) -> Hold | None:
    now = time.time()
    silenced = None if memory is None else Silences(memory.database).silence_over(failure.host, groups, failure.service, at=now)
    return hands_off(silenced, failure.facts.get("maintenance"), windows, failure.service, now, failure.host)


def _said(hold: Hold | None, now: float) -> str | None:
    return None if hold is None else hold.describe(now)


def _first_to_say(said: SaidOnce, what: str, now: float) -> bool:
    """Whether this host says ``what``; a memory that cannot record it has it said all the same: twice rather than never."""
    try:
        return said.first_to_say(what, at=now)
    except MemoryStoreError:
        return True


def _clear_healed(tools: Toolkit, outcomes: Sequence[IncidentOutcome]) -> list[FleetIncident]:
    """The fleet incidents a healed (or recovered) host leaves, closed when it was the last of their hosts."""
    healed = [outcome.state.failure.service for outcome in outcomes if outcome.state.status in (Status.HEALED.value, Status.RECOVERED.value)]
    if tools.memory is None or not healed:
        return []
    return FleetIncidents(tools.memory.database).clear_fleet_incidents(tools.target.name, healed, at=time.time())


def _waiting_plan(memory: Memory | None, plan_id: str) -> Mapping[str, Any] | None:
    """The stored plan a waiting plan's link names, or None (no link) when the memory cannot say: a message never fails
    the heal."""
    if memory is None:
        return None
    unreadable: tuple[type[BaseException], ...] = (MemoryStoreError, *memory.database.errors)
    try:
        return memory.plan(plan_id)
    except unreadable:
        return None


def _with_interrupted(handled: dict[str, Any], host: str, interrupted: list[dict[str, Any]]) -> dict[str, Any]:
    if interrupted:
        handled.update(interrupted=interrupted, summary=[interrupted_line(host, entry) for entry in interrupted] + handled["summary"])
    return handled


def _show_progress(show: Callable[[str], None], max_attempts: int, state: IncidentState, node: str) -> None:
    """Long work on the terminal, per host."""
    line = progress_line(state, node, max_attempts=max_attempts, now=time.time())
    if line is not None:
        show(line)


def progress_line(state: IncidentState, node: str, *, max_attempts: int, now: float) -> str | None:
    """Where an incident is, once it takes long (a canary awaited, a slow start, verification retries): its host and
    service, attempt n of m, the node it enters and the time so far; None while it is quick."""
    took = now - state.started_at
    if took < LONG_WORK_S:
        return None
    attempt = max(1, len(state.attempts) + (node == "diagnose"))  # diagnose opens the next attempt
    return f"{state.failure.host} {state.failure.service}: attempt {attempt} of {max_attempts}: {node} ({took:.0f} s)"
