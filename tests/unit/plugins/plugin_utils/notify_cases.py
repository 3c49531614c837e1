"""What the notify tests share: a real HTTP server on 127.0.0.1 recording what it was sent, incidents in their
final states, and the two jobs of a plan that waits for a person - the heal job that stores it and the approve job that
runs it - each telling the destinations of its ``notify`` option, with a real memory."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator, Mapping

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play_context import PlayContext
from ansible.plugins.loader import connection_loader
from ansible.template import Templar
from memory_places import MemoryPlace

from ansible_collections.sentinel.heal.plugins.module_utils._guard.judge import Decision, Verdict
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import FleetView
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard import approvals
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, Failure, Plan, PlanSource, Step, StepResult
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.engine import FlowTrace
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.options import EXECUTE_SPEC, HEAL_SPEC
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import IncidentOutcome, IncidentState, TaskContext, Toolkit
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.destinations import destinations_from
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.approved import carry_out
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.heal import HealSession
from helpers import CONFIG_OK, HEALTHY, NGINX_SPEC, ScriptedExecutor, _tools, nginx_failure


class Recorder:
    """What the server was sent (path, JSON body), and how it answers: ``status`` per path, ``sleep_s`` before answering."""

    def __init__(self) -> None:
        self.received: list[tuple[str, Any]] = []
        self.status: dict[str, int] = {}
        self.sleep_s = 0.0
        self.url = ""

    def bodies(self, path: str) -> list[Any]:
        return [body for at, body in self.received if at == path]


@contextlib.contextmanager
def recording_server() -> Iterator[Recorder]:
    """A real HTTP server on 127.0.0.1, in a thread, recording each POST's JSON body."""
    recorder = Recorder()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            recorder.received.append((self.path, body))
            if recorder.sleep_s:
                time.sleep(recorder.sleep_s)
            status = recorder.status.get(self.path, 200)
            try:
                self.send_response(status)
                self.end_headers()
                self.wfile.write(b"ok")
            except OSError:  # the client gave up waiting
                pass

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    recorder.url = f"http://127.0.0.1:{server.server_address[1]}"
    try:
        yield recorder
    finally:
        server.shutdown()
        server.server_close()


def _verdict(argv: tuple[str, ...], decision: Decision) -> Verdict:
    return Verdict(command=" ".join(argv), argv=argv, decision=decision, reason="the policy says so", rule="rule", become=True, policy_version="v1")


START = ("service", "nginx", "start")


def outcome(status: str, *, host: str = "web1", attempts: int = 1, approved_by: str | None = None, summary: str | None = None,
            evidence: dict[str, Any] | None = None, reason: str = "") -> IncidentOutcome:
    failure = nginx_failure(host=host)
    if summary is not None or evidence:
        failure = dataclasses.replace(failure, summary=summary or failure.summary, evidence={**failure.evidence, **(evidence or {})})
    plan = Plan(PlanSource.RUNBOOK, "nginx-stale-pid", "remove the pid file", (Step("service {init_service} start", START),))
    decision = Decision.APPROVE if status == "awaiting_approval" else Decision.ALLOW
    tries = [Attempt(number=number, diagnosis="stale pid", plan=plan, verdicts=[_verdict(START, decision)],
                     results=[StepResult(START, "failed" if number < attempts or status == "escalated" else "ok", rc=1)],
                     outcome=status if number == attempts else "failed", approved_by=approved_by if number == attempts else None)
             for number in range(1, attempts + 1)]
    state = IncidentState(failure=failure, attempts=tries, status=status, reason=reason or f"nginx {status}",
                          plan_id="plan-7" if status == "awaiting_approval" else None)
    return IncidentOutcome(state=state, trace=FlowTrace())


def stored_plan() -> approvals.StoredPlan:
    """nginx's plan as the heal stored it for a person (what a denial is of)."""
    failure = nginx_failure()
    plan = Plan(PlanSource.RUNBOOK, "nginx-stale-pid", "remove the pid file", (Step("service {init_service} start", START),))
    return approvals.StoredPlan(plan_id="plan-7", incident_id="incident-1", attempt=1, host="web1", service="nginx", fingerprint=failure.fingerprint,
                                plan=plan, failure=failure, policy_version="v1", policy_file="", plan_hash="h", status="pending",
                                created_at=1.0, expires_at=3601.0, decided_by=None)


# nginx's steps wait for a person: the policy allows only its configuration test (an evidence command)
WAITING_POLICY = "version: 1\nrules:\n  - {id: t, executable: nginx, argv: ['-t'], decision: allow, become: true}\n"
# what the host's check said of it, which its incident's fingerprint (the key of its messages) is made of too
FACTS = {"os": {"id": "debian", "id_like": "", "version_id": "12"}, "service_manager": "sysv"}


def task_of(host: str, task_vars: Mapping[str, Any] | None = None, *, check_mode: bool = False) -> TaskContext:
    """A task on ``host`` over Ansible's local connection: nothing is read or run on this machine."""
    return TaskContext(action=None, connection=connection_loader.get("local", PlayContext(), None), templar=Templar(loader=DataLoader()),
                       task_vars={"inventory_hostname": host, **(task_vars or {})}, check_mode=check_mode, diff=False,
                       ask_operator=lambda *_: None, show=lambda _line: None)


def validated(spec: Mapping[str, Any], **params: Any) -> dict[str, Any]:
    checked = ArgumentSpecValidator(dict(spec)).validate(params)
    assert not checked.error_messages, checked.error_messages
    return dict(checked.validated_parameters)


def waiting_failure(host: str = "web1") -> Failure:
    return dataclasses.replace(nginx_failure(host=host), facts=FACTS)


def heal_job(place: MemoryPlace, notify: list[dict[str, Any]], *, host: str = "web1",
             variables: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], str]:
    """The heal job of nginx on ``host`` (its AWX ``variables``), whose plan waits for a person: its result and the
    plan's id."""
    policy = place.state_dir / "waiting.yml"
    policy.write_text(WAITING_POLICY)
    failure = waiting_failure(host)
    args = validated(HEAL_SPEC, services=[NGINX_SPEC], failures=[failure.to_dict()], policy=str(policy), notify=notify, **place.options())
    tools = _tools(place.state_dir, ScriptedExecutor(CONFIG_OK), [], policy=load_policy(policy), memory=place.open())
    result = HealSession(args, task_of(host, variables)).handle([failure], tools, FleetView())
    [incident] = result["incidents"]
    assert incident["status"] == "awaiting_approval", incident["reason"]
    return result, incident["plan_id"]


def approve_job(place: MemoryPlace, notify: list[dict[str, Any]], plan_id: str, *, healed: bool = True, approver: str = "alice",
                host: str = "web1", variables: Mapping[str, Any] | None = None) -> tuple[dict[str, Any], ScriptedExecutor]:
    """The approve job of the plan (sentinel.heal.execute's checks and claim as approve.yml runs them, the steps scripted):
    its result, and what ran."""
    policy = place.state_dir / "waiting.yml"
    args = validated(EXECUTE_SPEC, plan_ids=[plan_id], approved_by=approver, policy=str(policy), notify=notify, **place.options())
    memory = place.open()
    stored = approvals.load(memory, plan_id)
    verdicts = {plan_id: approvals.authorize(stored, host=host, policy=load_policy(policy))}
    executor = ScriptedExecutor()
    verified = HEALTHY if healed else {"healthy": False, "summary": "nginx is not running", "checks": []}

    def tools_of(_stored: approvals.StoredPlan) -> Toolkit:
        return _tools(place.state_dir, executor, [verified], policy=load_policy(policy), memory=memory)

    return carry_out([stored], verdicts, memory, tools_of, args, task_of(host, variables), destinations_from(notify), ()), executor
