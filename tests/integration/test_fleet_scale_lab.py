"""Twenty lab hosts broken at once, healed with forks=20: every episode recorded once, the blast radius honoured
(at most 5 remediations at a time, the rest deferred and taken up by the next runs), the flapping limit honoured
fleet-wide, and the kill switch thrown mid-run honoured by every host. The session's fleet comes back afterwards."""

from __future__ import annotations

import json
import sqlite3
import sys
import threading
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from conftest import ROOT, SYSV_HOSTS, episodes, one_line, run_playbook, sh
from test_fault_survival_lab import slow_plan, wait_for

sys.path.insert(0, str(ROOT / "bench"))

import fleet_speed

HEAL = "playbooks/heal.yml"
COUNT = 20
CAP = 5


def remediation_events(state: Path) -> dict[Path, list[dict[str, Any]]]:
    """The events ansible-runner kept of each remediation run, by run directory."""
    return {run_dir: [json.loads(path.read_text()) for path in (run_dir / "artifacts" / "run" / "job_events").glob("*.json")]
            for run_dir in sorted(state.glob("runs/*/*-remediation-*"))}


def epoch(event: dict[str, Any]) -> float:
    created = datetime.fromisoformat(event["created"])
    return (created if created.tzinfo else created.replace(tzinfo=UTC)).timestamp()


def remediation_windows(state: Path) -> list[tuple[float, float]]:
    """When each remediation run began and ended."""
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


def test_twenty_hosts_broken_at_once_within_the_blast_radius_the_flapping_limit_and_the_kill_switch(lab: Any, tmp_path: Path) -> None:
    hosts = fleet_speed.inventory(tmp_path / "inventory", COUNT)
    names = lab.host_names(COUNT)
    try:
        lab.down()
        lab.up(count=COUNT, init="systemd", timeout=180.0)
        state = tmp_path / "state"
        break_nginx(lab)
        capped = ("-i", str(hosts), "-f", str(COUNT), "-e", f"autoheal_max_running={CAP}")
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
        flapping = run_playbook(HEAL, "-i", str(hosts), "-f", str(COUNT), "-e", "autoheal_flap_limit=1", state_dir=state)
        output = one_line(flapping.output)
        left = {name for name in names if f"{name}: nginx escalated: nginx: flapping: remediated 1 times in the last 60 min" in output}
        assert left == set(names), flapping.output
        assert len(episodes(state)) == len(rows)  # nothing ran, nothing recorded

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
        run = run_playbook(HEAL, "-i", str(hosts), "-f", str(COUNT), *slow_plan(tmp_path, 10), state_dir=state)
        thrower.join()
        assert thrown and run.rc == 0, run.output
        outcomes = {row["host"]: row["outcome"] for row in episodes(state)}
        assert set(outcomes) == set(names) and set(outcomes.values()) <= {"suspended", "healed"}, outcomes
        assert list(outcomes.values()).count("suspended") >= COUNT // 2, outcomes
        # no step started after the switch was thrown (a run polls it every second; allow that much)
        started_after = [(run_dir.parent.name, event["event_data"]["task"]) for run_dir, events in remediation_events(state).items()
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
        run = run_playbook(HEAL, "-i", str(hosts), "-f", str(COUNT), *slow_plan(tmp_path, 6), state_dir=state)
        took = time.monotonic() - began
        cutter.join()
        assert cut == lost, "the links were never cut"
        outcomes = {row["host"]: row["outcome"] for row in episodes(state)}
        assert {name: outcomes.get(name) for name in names[:COUNT // 2]} == dict.fromkeys(names[:COUNT // 2], "healed"), outcomes
        assert all(outcomes.get(name) == "unreachable" or run.recap[name]["unreachable"] == 1 for name in lost), (outcomes, run.recap)
        assert took < 180, f"the job took {took:.0f} s"  # each lost host noticed within seconds, none waited out a timeout
    finally:
        lab.down()
        lab.up(inits=SYSV_HOSTS)
