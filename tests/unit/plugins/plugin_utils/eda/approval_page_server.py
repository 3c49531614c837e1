"""The approval page as ansible-rulebook runs it, for the tests: the real event source (its file, loaded as
ansible-rulebook loads it) serving on a loopback port, its queue drained into a list the test reads, driven by real HTTP
requests (urllib); a real SQLite memory, named by a real inventory, holding a plan that waits."""

from __future__ import annotations

import asyncio
import contextlib
import hashlib
import hmac
import importlib.util
import json
import re
import socket
import threading
import time
import urllib.error
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlencode

from ansible_collections.sentinel.heal.plugins.module_utils._guard.judge import Decision, Verdict
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.approvers import token_sha256
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.approvals import binding_hash
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, Failure, PendingPlan, Plan, PlanSource, Step
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.links import LinkClaim, LinkSigner, TokenKey
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory
from helpers import NGINX_SPEC, nginx_failure

SOURCE = (Path(__file__).resolve().parents[5] / ".collections" / "ansible_collections" / "sentinel" / "heal" / "extensions" / "eda" / "plugins"
          / "event_source" / "approval_page.py")
LINK_SECRET = "the link secret the heal jobs and the page share"
SLACK_SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
ALICE_TOKEN = "alice-personal-token-0123456789"
APPROVERS = [{"name": "alice", "slack_user": "U0ALICE1", "token_sha256": token_sha256(ALICE_TOKEN)}, {"name": "carol", "slack_user": "U0CAROL1"}]
RESTORED = "/etc/nginx/sites-enabled/default"


@dataclass
class Reply:
    status: int
    body: str
    headers: dict[str, str]

    def form_field(self, name: str) -> str:
        found = re.search(rf'name="{name}" value="([^"]*)"', self.body)
        return found.group(1) if found else ""


@dataclass
class Page:
    url: str
    state_dir: Path
    events: list[dict[str, Any]] = field(default_factory=list)

    def get(self, token: str) -> Reply:
        return self._send(urllib.request.Request(f"{self.url}/approve?{urlencode({'t': token})}"))

    def post(self, form: dict[str, str]) -> Reply:
        return self._send(urllib.request.Request(f"{self.url}/approve", data=urlencode(form).encode(), method="POST"))

    def slack(self, body: bytes, *, stamp: int | None = None, secret: str = SLACK_SECRET) -> Reply:
        stamp = int(time.time()) if stamp is None else stamp
        mac = hmac.new(secret.encode(), f"v0:{stamp}:".encode() + body, hashlib.sha256).hexdigest()
        headers = {"X-Slack-Request-Timestamp": str(stamp), "X-Slack-Signature": f"v0={mac}", "Content-Type": "application/x-www-form-urlencoded"}
        return self._send(urllib.request.Request(f"{self.url}/slack/interactive", data=body, headers=headers, method="POST"))

    def decide(self, token: str, decision: str = "approved", personal: str = ALICE_TOKEN) -> Reply:
        """As a person does it: open the link, then press the button on the page it shows."""
        shown = self.get(token)
        return self.post({"t": shown.form_field("t") or token, "page": shown.form_field("page"), "decision": decision, "token": personal})

    def settled_events(self, at_least: int, within_s: float = 5.0) -> list[dict[str, Any]]:
        """The events, once the source's queue has handed on at least that many (it does so just after answering)."""
        deadline = time.monotonic() + within_s
        while len(self.events) < at_least and time.monotonic() < deadline:
            time.sleep(0.02)
        return list(self.events)

    def memory(self) -> Memory:
        return Memory(self.state_dir)

    def _send(self, request: urllib.request.Request) -> Reply:
        try:
            with urllib.request.urlopen(request, timeout=10) as response:
                return Reply(response.status, response.read().decode(), dict(response.headers))
        except urllib.error.HTTPError as error:
            return Reply(error.code, error.read().decode(), dict(error.headers))


def slack_click(action_id: str, token: str, user: str = "U0ALICE1") -> bytes:
    payload = {"type": "block_actions", "user": {"id": user}, "team": {"id": "T1"},
               "actions": [{"action_id": action_id, "block_id": "sentinel_heal_approval", "value": token, "type": "button"}]}
    return urlencode({"payload": json.dumps(payload)}).encode()


def waiting_plan(memory: Memory, *, summary: str | None = None, rationale: str = "the pid file names a process that is gone",
                 diff: str = "", ttl: float = 3600) -> tuple[str, LinkClaim]:
    """A plan stored to wait for a person, as the heal loop stores one, and the claim of its link."""
    failure: Failure = nginx_failure()
    if summary is not None or diff:
        changes = {"changes": {"files": [{"path": RESTORED, "change": "modified", "diff": diff}], "packages": []}} if diff else {}
        failure = Failure(host=failure.host, service=failure.service, failure_class=failure.failure_class, summary=summary or failure.summary,
                          evidence={**failure.evidence, **changes}, spec=NGINX_SPEC)
    argvs = [("rm", "-f", "/run/nginx.pid"), ("service", "nginx", "start")] + ([("sentinel-heal-restore", RESTORED, "9c1e" * 16)] if diff else [])
    plan = Plan(PlanSource.RUNBOOK, "nginx-stale-pid", rationale, tuple(Step(" ".join(argv), argv) for argv in argvs))
    now = time.time()
    verdicts = [Verdict(command=" ".join(argv), argv=argv, decision=Decision.APPROVE, reason="a person decides <this>", rule="default-approve",
                        become=True, policy_version="v1") for argv in argvs]
    attempt = Attempt(number=1, plan=plan, verdicts=verdicts, outcome="awaiting_approval", policy_version="v1", started_at=now, finished_at=now)
    plan_hash = binding_hash(plan, host=failure.host, service=failure.service, fingerprint=failure.fingerprint, policy_version="v1")
    _episode, plan_id = memory.record_attempt(incident_id=f"incident-{now}", failure=failure, attempt=attempt,
                                              pending=PendingPlan(plan_hash=plan_hash, policy_file="", created_at=now, expires_at=now + ttl))
    assert plan_id is not None
    return plan_id, LinkClaim(plan_id=plan_id, plan_hash=plan_hash, host=failure.host, expires_at=int(now + ttl))


def link(claim: LinkClaim, secret: str = LINK_SECRET) -> str:
    return LinkSigner(base_url="http://127.0.0.1", key=TokenKey(secret)).link(claim).token


def _free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@contextlib.contextmanager
def serving(tmp_path: Path, **options: Any) -> Iterator[Page]:
    """The source's main() on a loopback port in a thread of its own, as ansible-rulebook runs it, until the test ends."""
    state_dir = tmp_path / "state"
    inventory = tmp_path / "inventory.yml"
    inventory.write_text(json.dumps({"all": {"vars": {"autoheal_state_dir": str(state_dir)},
                                             "hosts": {"web1": {"autoheal_services": [{"name": "nginx"}]}}}}))
    Memory(state_dir).close()
    spec = importlib.util.spec_from_file_location(f"approval_page_source_{id(tmp_path)}", SOURCE)
    assert spec is not None and spec.loader is not None
    source = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(source)
    port = _free_port()
    page = Page(url=f"http://127.0.0.1:{port}", state_dir=state_dir)
    args = {"inventory": str(inventory), "port": port, "link_secret": LINK_SECRET, "approvers": APPROVERS,
            "slack_signing_secret": SLACK_SECRET, **options}
    loop = asyncio.new_event_loop()
    started = threading.Event()
    failed: list[BaseException] = []

    async def run() -> None:
        queue: asyncio.Queue[Any] = asyncio.Queue()

        async def drain() -> None:
            while True:
                page.events.append(await queue.get())

        drainer = asyncio.ensure_future(drain())
        started.set()
        try:
            await source.main(queue, args)
        finally:
            drainer.cancel()
            while not queue.empty():  # what the source put on the queue as it was stopped
                page.events.append(queue.get_nowait())

    def thread() -> None:
        try:
            loop.run_until_complete(run())
        except asyncio.CancelledError:
            pass
        except BaseException as exc:  # noqa: BLE001 - the test says what stopped the source
            failed.append(exc)
            started.set()

    runner = threading.Thread(target=thread, daemon=True)
    runner.start()
    started.wait(10)
    deadline = time.monotonic() + 10
    while not failed:
        with contextlib.suppress(OSError), socket.create_connection(("127.0.0.1", port), timeout=0.2):
            break
        assert time.monotonic() < deadline, "the approval page did not start listening"
        time.sleep(0.05)
    assert not failed, failed
    try:
        yield page
    finally:
        loop.call_soon_threadsafe(lambda: [task.cancel() for task in asyncio.all_tasks(loop)])
        runner.join(10)
        loop.close()
