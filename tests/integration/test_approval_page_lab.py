"""Approve where the message is, end to end: a heal in review mode stores nginx's plan on node3 and tells a webhook (a
recording server on loopback) with a signed link; the real ansible-rulebook serves the link's page
(sentinel.heal.approve_from_chat); link previews fetch it and decide nothing; headless Chromium opens it, alice types her
personal token and clicks Approve; the rulebook runs sentinel.heal.approve for exactly that plan and nginx answers again.
A second press of the same form is refused, and no second job runs."""

from __future__ import annotations

import hashlib
import json
import re
import socket
import sqlite3
import threading
import time
import urllib.error
import urllib.request
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator
from urllib.parse import urlencode, urlsplit

import pytest
from browser import Chromium
from conftest import Faults, one_line, run_playbook
from rulebook import Rulebook, answers, eda_inventory

pytestmark = pytest.mark.lab

HOST = "node3"  # sysv, outside the group executor: the guard on the controller judges the plan
LINK_SECRET = "the link secret of the lab's heal jobs and approval page"
ALICE_TOKEN = "alice-personal-token-of-the-lab-0123"


class Recorder(BaseHTTPRequestHandler):
    """A webhook destination: every JSON body posted to it, kept."""

    bodies: list[dict[str, Any]] = []

    def do_POST(self) -> None:
        self.bodies.append(json.loads(self.rfile.read(int(self.headers["Content-Length"]))))
        self.send_response(204)
        self.end_headers()

    def log_message(self, *_args: Any) -> None:
        pass


@pytest.fixture
def webhook() -> Iterator[tuple[str, list[dict[str, Any]]]]:
    bodies: list[dict[str, Any]] = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), type("Recording", (Recorder,), {"bodies": bodies}))
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        yield f"http://127.0.0.1:{server.server_port}/hook", bodies
    finally:
        server.shutdown()


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


def plan_status(state_dir: Path, plan_id: str) -> str:
    with sqlite3.connect(state_dir / "memory.sqlite3") as conn:
        [(status,)] = conn.execute("SELECT status FROM plans WHERE plan_id = ?", (plan_id,)).fetchall()
    return str(status)


def fetch(url: str, data: bytes | None = None) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(urllib.request.Request(url, data=data, method="POST" if data else "GET"), timeout=10) as answer:
            return answer.status, answer.read().decode()
    except urllib.error.HTTPError as refused:
        return refused.code, refused.read().decode()


def test_a_plan_approved_on_its_page_in_chromium_heals_and_a_link_preview_approves_nothing(
        lab: Any, faults: Faults, tmp_path: Path, webhook: tuple[str, list[dict[str, Any]]]) -> None:
    hook_url, bodies = webhook
    state_dir, port = tmp_path / "state", free_port()
    approvers = tmp_path / "approvers.yml"
    alice = {"name": "alice", "token_sha256": hashlib.sha256(ALICE_TOKEN.encode()).hexdigest()}
    approvers.write_text(json.dumps({"SENTINEL_HEAL_APPROVERS": [alice]}))
    inventory = eda_inventory(tmp_path / "inventory", state_dir)
    with Rulebook.of("approve_from_chat", inventory, tmp_path / "rulebook.log", ready=f"approval page on 127.0.0.1:{port}",
                     variables={"SENTINEL_HEAL_APPROVAL_PORT": str(port), "SENTINEL_HEAL_APPROVAL_LINK_SECRET": LINK_SECRET},
                     vars_file=approvers) as rulebook:
        faults.inject(HOST, "nginx-killed")
        settings = {"autoheal_mode": "review", "autoheal_target_services": ["nginx"], "autoheal_notify": [{"type": "webhook", "url": hook_url}],
                    "autoheal_approval_page_url": f"http://127.0.0.1:{port}", "autoheal_approval_link_secret": LINK_SECRET}
        waiting = run_playbook("playbooks/heal.yml", "--limit", HOST, "-e", json.dumps(settings), state_dir=state_dir)
        assert waiting.rc == 0 and "awaits approval of plan" in waiting.output, waiting.output
        [plan_id] = re.findall(r"awaits approval of plan ([0-9a-f]{32})", waiting.output)
        [link] = [body["approval_url"] for body in bodies if body.get("approval_url")]
        assert urlsplit(link).netloc == f"127.0.0.1:{port}", link

        # chat clients and mail scanners fetch a link to preview it: the page, never a decision
        for _preview in range(3):
            status, page = fetch(link)
            assert status == 200 and plan_id in page and "nginx start" in page, page[:2000]
        assert plan_status(state_dir, plan_id) == "pending"
        assert "Run the approved plans" not in rulebook.output()
        form = dict(re.findall(r'name="(t|page)" value="([^"]*)"', page))

        with Chromium() as browser:
            shown = browser.open(link)
            assert f"Plan {plan_id}" in shown and "Opening this page decides nothing" in shown, shown
            browser.type_into("token", ALICE_TOKEN)
            said = browser.click("button[value=approved]")
        assert f"plan {plan_id} approved by alice via page" in said, said

        rulebook.wait_for(r"^PLAY RECAP", timeout=180)
        deadline = time.monotonic() + 30
        while not answers(f"http://{lab.address(HOST)}/") and time.monotonic() < deadline:
            time.sleep(0.5)
        assert answers(f"http://{lab.address(HOST)}/"), rulebook.output()[-4000:]
        assert plan_status(state_dir, plan_id) == "executed"
        assert "healed" in one_line(rulebook.output()), rulebook.output()[-4000:]

        # the same press again (a retry, a second tab): refused, recorded, and no second job
        status, page = fetch(f"http://127.0.0.1:{port}/approve", urlencode({**form, "decision": "approved", "token": ALICE_TOKEN}).encode())
        assert status == 409 and "was approved, and was run, by alice" in page, (status, page[:2000])
        time.sleep(3)
        assert len(re.findall(r"^PLAY \[Run the approved plans on their hosts\]", rulebook.output(), re.M)) == 1, rulebook.output()[-4000:]
    with sqlite3.connect(state_dir / "memory.sqlite3") as conn:
        requests = conn.execute("SELECT outcome, refusal, approver FROM approval_requests WHERE plan_id = ? ORDER BY id", (plan_id,)).fetchall()
    assert [(outcome, refusal) for outcome, refusal, _approver in requests] == [("accepted", ""), ("refused", "used")], requests
    assert requests[0][2] == "alice", requests
