"""What the notify tests share: a real HTTP server on 127.0.0.1 recording what it was sent, and incidents in their
final states."""

from __future__ import annotations

import contextlib
import dataclasses
import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

from ansible_collections.sentinel.heal.plugins.module_utils._guard.judge import Decision, Verdict
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, Plan, PlanSource, Step, StepResult
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.engine import FlowTrace
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import IncidentOutcome, IncidentState
from helpers import nginx_failure


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
