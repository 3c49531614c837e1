"""Twenty lab hosts broken at once, healed with forks=20: every episode recorded once, the blast radius honoured
(at most 5 remediations at a time, the rest deferred and taken up by the next runs), the flapping limit honoured
fleet-wide, and the kill switch thrown mid-run honoured by every host. On the same fleet, the run's rollout: a new
plan is tried on one host first, and a run past its error threshold halts. A test after this module on the session's
fleet boots it again (conftest's own_fleet).

Each of these limits is about healing host by host, so fleet incidents are off here (HOST_BY_HOST): twenty hosts whose
nginx died at once are otherwise one fleet incident (test_fleet_incident_lab.py)."""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
import time
from datetime import UTC, datetime
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path
from typing import Any, Iterator

import pytest
from conftest import ROOT, commands_run, episodes, one_line, run_playbook, sh
from llm_server import Answer, ScriptedLLM
from test_fault_survival_lab import slow_plan, wait_for

sys.path.insert(0, str(ROOT / "bench"))

import fleet
import fleet_speed
import lab_hosts

HEAL = "playbooks/heal.yml"
COUNT = 20
CAP = 5


def remediation_events(state: Path) -> dict[tuple[Path, str], list[dict[str, Any]]]:
    """The events of each host's steps ansible-runner kept, by run directory and host (the forks that remediate at
    the same time share a run)."""
    by_host: dict[tuple[Path, str], list[dict[str, Any]]] = {}
    for run_dir in sorted(state.glob("runs/*/*-remediation-*")):
        for path in (run_dir / "artifacts" / "run" / "job_events").glob("*.json"):
            event = json.loads(path.read_text())
            data = event.get("event_data") or {}
            if str(data.get("task", "")).startswith("step ") and data.get("host"):
                by_host.setdefault((run_dir, data["host"]), []).append(event)
    return by_host


def epoch(event: dict[str, Any]) -> float:
    created = datetime.fromisoformat(event["created"])
    return (created if created.tzinfo else created.replace(tzinfo=UTC)).timestamp()


def remediation_windows(state: Path) -> list[tuple[float, float]]:
    """When each host's remediation began and ended."""
    return [(min(map(epoch, events)), max(map(epoch, events))) for events in remediation_events(state).values()]


def most_at_once(windows: list[tuple[float, float]]) -> int:
    edges = sorted([(start, 1) for start, _end in windows] + [(end, -1) for _start, end in windows])
    running = peak = 0
    for _at, change in edges:
        running += change
        peak = max(peak, running)
    return peak


def break_nginx(lab: Any) -> None:
    for name in lab.host_names(COUNT):
        lab.inject(name, "nginx-killed")


pytestmark = pytest.mark.own_fleet


@pytest.fixture(scope="module")
def twenty(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Path]:
    """Twenty systemd hosts instead of the session's fleet, for this module: their inventory."""
    hosts = fleet_speed.inventory(tmp_path_factory.mktemp("twenty") / "inventory", COUNT)
    lab.down()
    lab.up(count=COUNT, init="systemd", timeout=180.0)
    yield hosts


# The new plans of the rollout tests pause first, so that every host has planned before the first one verifies.
ROLLOUT_POLICY = """version: 1
rules:
  - {id: nginx-config-test, executable: nginx, argv: [-t], decision: allow, become: true}
  - {id: pause, executable: sleep, argv: ["4"], decision: allow}
  - {id: nginx-unit, executable: systemctl, argv: [[start, reset-failed], nginx], decision: allow, become: true}
"""
PLAN_THAT_FAILS = [["sleep", "4"], ["systemctl", "reset-failed", "nginx"]]  # runs fine, starts nothing
PLAN_THAT_HEALS = [["sleep", "4"], ["systemctl", "start", "nginx"]]
RESET_RUNBOOK = ("---\nid: reset-only\ntitle: reset nginx, start nothing\nservices: [nginx]\nmatch: {failure_class: [not_running]}\n"
                 "steps:\n  - systemctl reset-failed nginx\npriority: 1000\n---\n")


# Of the twenty hosts only node1 and node2 (the lab inventory's group executor, which run_playbook reads too) have an
# executor: the fleet-wide limits are the controller's, and every host here acts directly, the same way (as the lab's
# operator: the healing account's one sudo rule on node1 and node2 is the executor).
DIRECT = ("-e", "autoheal_enforcement=controller", *fleet.AS_ADMIN)
HOST_BY_HOST = ("-e", json.dumps({"autoheal_fleet_min_hosts": 0, "autoheal_fleet_min_percent": 0}))


def _rollout(tmp_path: Path, hosts: Path, llm: ScriptedLLM | None = None, **variables: Any) -> list[str]:
    policy = tmp_path / "rollout-policy.yml"
    policy.write_text(ROLLOUT_POLICY)
    # a policy of the test's own, which the controller enforces on every host here (DIRECT)
    extra: dict[str, Any] = {"autoheal_policy_file": str(policy), "autoheal_enforcement": "controller", "ansible_user": "admin",
                             "autoheal_builtin_runbooks": False,
                             "autoheal_max_attempts": 1, "autoheal_fleet_min_hosts": 0, "autoheal_fleet_min_percent": 0, **variables}
    if llm is not None:
        extra["autoheal_llm"] = {"model": "scripted-lab", "base_url": llm.base_url, "api_key": "sk-lab-scripted-0123456789abcdef",
                                 "timeout": 10, "max_retries": 1}
    return ["-i", str(hosts), "-e", json.dumps(extra)]


def _remediated(state: Path, names: list[str]) -> dict[str, list[list[str]]]:
    return {name: [argv for purpose, argv in commands_run(state, name) if purpose == "remediation"] for name in names}


def test_a_new_plan_runs_on_one_host_first_and_on_the_others_only_once_it_verified_there(lab: Any, twenty: Path, tmp_path: Path) -> None:
    three = lab.host_names(3)
    for name in three:
        lab.inject(name, "nginx-killed")
    try:
        # a plan that does not heal: it runs on exactly one host, the others wait for it and never run it
        with ScriptedLLM(default=Answer.plan(PLAN_THAT_FAILS)) as llm:
            state = tmp_path / "fails"
            run = run_playbook(HEAL, "--limit", ",".join(three), "-f", "3", *_rollout(tmp_path, twenty, llm), state_dir=state)
        remediated = _remediated(state, three)
        [canary] = [name for name in three if remediated[name]]
        assert remediated[canary] == PLAN_THAT_FAILS, remediated
        output = one_line(run.output)
        for name in set(three) - {canary}:
            assert (f"{name}: nginx deferred: nginx: deferred, nothing ran: this new plan failed verification on {canary}, the first "
                    "host to try it in this run; it runs on no other host") in output, run.output
            assert sh(lab, name, "systemctl", "is-failed", "nginx").strip() == "failed"  # untouched: still the killed unit
        assert f"{canary}: nginx escalated" in output
        assert {row["host"]: row["outcome"] for row in episodes(state)} == {canary: "failed", **dict.fromkeys(set(three) - {canary}, "deferred")}

        # a plan that heals: one host first, the others after it verified there; batches of two (Ansible's serial).
        # The same fault on all three again (the canary's unit was reset, a different incident)
        for name in three:
            lab.undo(name, "nginx-killed")
            lab.inject(name, "nginx-killed")
        with ScriptedLLM(default=Answer.plan(PLAN_THAT_HEALS)) as llm:
            state = tmp_path / "heals"
            run = run_playbook(HEAL, "--limit", ",".join(three), "-f", "3", *_rollout(tmp_path, twenty, llm, autoheal_serial=2),
                               state_dir=state)
        assert run.rc == 0, run.output
        assert run.output.count("TASK [sentinel.heal.autoheal : Check the declared services and heal the failed ones]") == 2  # two batches
        assert {row["host"]: row["outcome"] for row in episodes(state)} == dict.fromkeys(three, "healed")
        windows = {host: (min(map(epoch, events)), max(map(epoch, events))) for (_run, host), events in remediation_events(state).items()}
        first = min(windows, key=lambda name: windows[name][0])
        assert all(windows[first][1] < windows[name][0] for name in set(three) - {first}), windows
        assert all("200" in sh(lab, name, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/") for name in three)
    finally:
        for name in three:
            lab.undo(name, "nginx-killed")


class SharedUpstream:
    """The upstream every storefront proxies to (tests/lab/faults/storefront-upstream-on-controller.sh), on the
    controller's side of the lab's bridge: up, it answers 200; down, the port refuses."""

    ADDRESS = (lab_hosts.GATEWAY, 8090)

    def __init__(self) -> None:
        self._server: ThreadingHTTPServer | None = None

    def up(self) -> None:
        class Upstream(BaseHTTPRequestHandler):
            def do_GET(self) -> None:
                self.send_response(200)
                self.end_headers()
                self.wfile.write(b"the shared upstream")

            def log_message(self, format: str, *args: Any) -> None:
                return

        self._server = ThreadingHTTPServer(self.ADDRESS, Upstream)
        threading.Thread(target=self._server.serve_forever, daemon=True).start()

    def down(self) -> None:
        if self._server is not None:
            self._server.shutdown()
            self._server.server_close()
            self._server = None


# the storefront every one of the ten hosts serves, declared as the inventory would declare it
STOREFRONT = {"name": "storefront", "service": "nginx", "ports": [8082], "http": {"url": "http://127.0.0.1:8082/"}, "process": "nginx",
              "logs": ["/var/log/nginx/error.log"]}


def test_ten_hosts_whose_shared_upstream_is_down_are_one_fleet_incident_naming_it_and_its_return_closes_it(
        lab: Any, twenty: Path, tmp_path: Path) -> None:
    ten = lab.host_names(10)
    state = tmp_path / "state"
    heal = ("--limit", ",".join(ten), "-i", str(twenty), "-f", "10", *DIRECT, "-e", json.dumps({"autoheal_services": [STOREFRONT]}))
    upstream = SharedUpstream()
    upstream.up()
    try:
        for name in ten:
            lab.inject(name, "storefront-upstream-on-controller")
        assert run_playbook(HEAL, *heal, state_dir=state).rc == 0
        upstream.down()
        down = run_playbook(HEAL, *heal, state_dir=state)
        assert down.rc != 0, down.output  # the hosts escalate: someone is paged
        with sqlite3.connect(state / "memory.sqlite3") as conn:
            conn.row_factory = sqlite3.Row
            [incident] = conn.execute("SELECT * FROM fleet_incidents").fetchall()
            members = {row["host"] for row in conn.execute("SELECT host FROM fleet_incident_hosts WHERE incident_id = ?", (incident["id"],))}
        assert members == set(ten) and incident["closed_at"] is None and incident["service"] == "storefront"
        common = json.loads(incident["common_json"])
        assert common[0] == f"the same address http://{lab_hosts.GATEWAY}:8090", common
        output = one_line(down.output)
        assert f"fleet incident {incident['id']}: storefront fails the same way on 10 hosts" in output, down.output
        assert f"in common: the same address http://{lab_hosts.GATEWAY}:8090" in output
        # no host healed blindly: a plan verified before may run on the incident's canary, and on no other host once
        # it failed there; a new plan nowhere
        rows = episodes(state)
        assert "healed" not in {row["outcome"] for row in rows}, [(row["host"], row["outcome"]) for row in rows]
        assert len([name for name, ran in _remediated(state, ten).items() if ran]) <= 1

        upstream.up()
        back = run_playbook(HEAL, *heal, state_dir=state)
        assert back.rc == 0, back.output
        assert len(episodes(state)) == len(rows)  # nothing healed, nothing ran
        with sqlite3.connect(state / "memory.sqlite3") as conn:
            assert conn.execute("SELECT closed_at IS NOT NULL FROM fleet_incidents WHERE id = ?", (incident["id"],)).fetchone() == (1,)
        assert f"fleet incident {incident['id']} closed: storefront on its 10 hosts was seen without the failure" in one_line(back.output)
    finally:
        upstream.down()
        for name in ten:
            lab.undo(name, "storefront-upstream-on-controller")


def test_a_run_past_its_error_threshold_halts_and_the_remaining_hosts_are_left_alone(lab: Any, twenty: Path, tmp_path: Path) -> None:
    four = lab.host_names(4)
    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    (runbooks / "reset-only.md").write_text(RESET_RUNBOOK)
    for name in four:
        lab.inject(name, "nginx-killed")
    try:
        # one host at a time: node1 fails (1 of 4, 25%: not more than the threshold), node2 fails (50%): the rest halt
        state = tmp_path / "state"
        run = run_playbook(HEAL, "--limit", ",".join(four), *_rollout(
            tmp_path, twenty, autoheal_runbooks=[str(runbooks)], autoheal_max_fail_percentage=25, autoheal_serial=1,
            autoheal_fail_on_escalation=False), state_dir=state)
        assert run.rc == 0, run.output
        assert {row["host"]: row["outcome"] for row in episodes(state)} == {
            "node1": "failed", "node2": "failed", "node3": "halted", "node4": "halted"}
        output = one_line(run.output)
        # a threshold that is no percentage fails the task, naming the option and the value; nothing ran
        bad = run_playbook(HEAL, "--limit", "node3", *_rollout(tmp_path, twenty, autoheal_max_fail_percentage=101), state_dir=state)
        assert bad.rc == 2 and "max_fail_percentage: 101 is out of range (0-100)" in one_line(bad.output), bad.output
        for name in ("node3", "node4"):
            assert (f"{name}: nginx halted: nginx: remediations failed verification on 2 of the 4 hosts of this run (50%: node1, "
                    "node2), more than max_fail_percentage 25%; nothing more is attempted in this run") in output, run.output
            assert _remediated(state, [name]) == {name: []}
            assert sh(lab, name, "systemctl", "is-failed", "nginx").strip() == "failed"
    finally:
        for name in four:
            lab.undo(name, "nginx-killed")


def test_twenty_hosts_broken_at_once_within_the_blast_radius_the_flapping_limit_and_the_kill_switch(
    lab: Any, twenty: Path, tmp_path: Path,
) -> None:
    hosts = twenty
    names = lab.host_names(COUNT)
    state = tmp_path / "state"
    break_nginx(lab)
    capped = ("-i", str(hosts), "-f", str(COUNT), "-e", f"autoheal_max_running={CAP}", *HOST_BY_HOST)
    runs = 0
    while runs < 8 and {row["host"] for row in episodes(state) if row["outcome"] == "healed"} != set(names):
        run = run_playbook(HEAL, *capped, state_dir=state)
        runs += 1
        assert run.rc == 0, run.output  # deferred is not a failure
    rows = episodes(state)
    healed = [row["host"] for row in rows if row["outcome"] == "healed"]
    assert sorted(healed) == sorted(names), [(row["host"], row["outcome"]) for row in rows]  # each host healed once
    assert {row["outcome"] for row in rows} <= {"healed", "deferred"} and runs >= 2
    assert len({row["id"] for row in rows}) == len(rows) == len(healed) + sum(row["outcome"] == "deferred" for row in rows)
    assert most_at_once(remediation_windows(state)) <= CAP
    with sqlite3.connect(state / "memory.sqlite3") as conn:
        assert conn.execute("SELECT count(*) FROM leases").fetchone() == (0,)
        assert conn.execute("PRAGMA integrity_check").fetchone() == ("ok",)

    # broken again at once: each was remediated once in this hour, and the limit is 1 - nobody is touched
    break_nginx(lab)
    flapping = run_playbook(HEAL, "-i", str(hosts), "-f", str(COUNT), "-e", "autoheal_flap_limit=1", *HOST_BY_HOST, state_dir=state)
    output = one_line(flapping.output)
    left = {name for name in names if f"{name}: nginx escalated: nginx: flapping: remediated 1 times in the last 60 min" in output}
    assert left == set(names), flapping.output
    # nothing ran: each host's refusal is recorded, and only that
    assert sorted(row["outcome"] for row in episodes(state)) == sorted([row["outcome"] for row in rows] + ["flapping"] * len(names))

    # a fresh memory, a plan that pauses before it starts nginx, and the kill switch thrown while the pauses run
    state = tmp_path / "suspended"
    thrown: list[float] = []

    def throw_when_paused() -> None:
        if wait_for(lambda: "sleep 10" in sh(lab, names[0], "ps", "-eo", "args"), 120):
            suspend = run_playbook("playbooks/suspend.yml", "-e", "reason='stop everything'", "-e", "by=on-call", state_dir=state)
            assert suspend.rc == 0, suspend.output
            thrown.append(time.time())

    thrower = threading.Thread(target=throw_when_paused)
    thrower.start()
    run = run_playbook(HEAL, "-i", str(hosts), "-f", str(COUNT), *slow_plan(tmp_path, 10), *DIRECT, *HOST_BY_HOST, state_dir=state)
    thrower.join()
    assert thrown and run.rc == 0, run.output
    outcomes = {row["host"]: row["outcome"] for row in episodes(state)}
    assert set(outcomes) == set(names) and set(outcomes.values()) <= {"suspended", "healed"}, outcomes
    assert list(outcomes.values()).count("suspended") >= COUNT // 2, outcomes
    # no step started after the switch was thrown (a run polls it every second; allow that much)
    started_after = [(host, event["event_data"]["task"]) for (_run, host), events in remediation_events(state).items()
                     for event in events if event["event"] == "runner_on_start" and epoch(event) > thrown[0] + 2]
    assert started_after == []

    # half the fleet drops off the network while its remediations run (as when hosts are torn down): the job ends,
    # the other half is healed, and the lost hosts end unreachable
    assert run_playbook("playbooks/suspend.yml", "-e", "resume=true", "-e", "by=on-call", state_dir=state).rc == 0
    for name in names:
        lab.undo(name, "nginx-killed")  # the suspended hosts' nginx, started by hand
    break_nginx(lab)
    state = tmp_path / "lost"
    lost = names[COUNT // 2:]

    def cut_when_paused() -> None:
        if wait_for(lambda: "sleep 6" in sh(lab, lost[0], "ps", "-eo", "args"), 120):
            for name in lost:
                lab.cut_link(name)
            cut.extend(lost)

    cut: list[str] = []
    cutter = threading.Thread(target=cut_when_paused)
    cutter.start()
    began = time.monotonic()
    run = run_playbook(HEAL, "-i", str(hosts), "-f", str(COUNT), *slow_plan(tmp_path, 6), *DIRECT, *HOST_BY_HOST, state_dir=state)
    took = time.monotonic() - began
    cutter.join()
    assert cut == lost, "the links were never cut"
    outcomes = {row["host"]: row["outcome"] for row in episodes(state)}
    assert {name: outcomes.get(name) for name in names[:COUNT // 2]} == dict.fromkeys(names[:COUNT // 2], "healed"), outcomes
    assert all(outcomes.get(name) == "unreachable" or run.recap[name]["unreachable"] == 1 for name in lost), (outcomes, run.recap)
    assert took < 180, f"the job took {took:.0f} s"  # each lost host noticed within seconds, none waited out a timeout
