"""Repairs that do not hold, on the lab fleet: nginx killed a few seconds after every start, on a systemd host and on a
sysv host. Each heal brings it back and it holds through its settle window; the next run within the relapse window is
that heal's relapse, says so first and is healed once more, planned afresh; the run after that is the second relapse
in a row, escalated with both heals named, and nothing runs. Neither heal is left trusted as a verified fix."""

from __future__ import annotations

import re
import time
from pathlib import Path
from typing import Any

import pytest
from conftest import Faults, RollOut, acted, episodes, one_line, run_playbook, sh

HEAL = "playbooks/heal.yml"
# the window the test heals within: the lab's playbook runs take each fault as an incident of its own otherwise
WINDOW = ("-e", "autoheal_relapse_window=900")
# seconds after each start the killer kills nginx: past the verification and its settle window
KILL_AFTER_S = "12"
SITE = "/etc/nginx/sites-available/default"
# the line a configuration-management timer keeps pushing into nginx's site: a directive nginx does not know
PUSHED = "lab_pushed_directive on;"


def _down(lab: Any, host: str, seconds: float = 40) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if "200" not in sh(lab, host, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "--max-time", "2", "http://127.0.0.1/"):
            return True
        time.sleep(0.5)
    return False


@pytest.mark.parametrize("host", ["node1", "node3"])
def test_a_service_killed_after_every_start_relapses_once_and_is_escalated_with_both_heals_at_the_second(
        lab: Any, faults: Faults, tmp_path: Path, host: str) -> None:
    state = tmp_path / "state"
    faults.inject(host, "service-killed-after-start", "nginx", "80", "/run/nginx.pid", KILL_AFTER_S)
    first = run_playbook(HEAL, "--limit", host, *WINDOW, state_dir=state)
    assert first.rc == 0 and f"{host}: nginx healed in 1 attempt" in one_line(first.output), first.output
    assert _down(lab, host), "the killer did not kill nginx again"

    second = run_playbook(HEAL, "--limit", host, *WINDOW, state_dir=state)
    said = one_line(second.output)
    assert second.rc == 0 and f"{host}: nginx healed at " in said and " (episode 1); failed again at " in said, second.output
    assert "; healed again in 1 attempt with: " in said and "[plan from memory" not in said, second.output
    assert _down(lab, host), "the killer did not kill nginx again"
    ran_before = acted(state, host)

    third = run_playbook(HEAL, "--limit", host, *WINDOW, state_dir=state)
    said = one_line(third.output)
    assert third.rc == 2 and f"{host} nginx: escalated" in said, third.output
    assert " (episode 2); failed again at " in said and "its second relapse in a row: before, nginx healed at " in said, third.output
    assert " (episode 1); failed again at " in said and "neither fix held, so neither is replayed" in said, third.output
    assert acted(state, host) == ran_before  # nothing ran for the second relapse
    rows = episodes(state)
    assert [(row["id"], row["outcome"], row["relapsed_from"]) for row in rows] == [(1, "healed", None), (2, "healed", 1), (3, "escalated", 2)]
    assert rows[0]["relapsed_at"] is not None and rows[1]["relapsed_at"] is not None and rows[2]["relapsed_at"] is None


def test_a_configuration_a_timer_breaks_again_after_its_restore_is_escalated_naming_the_timers_service(
        lab: Any, faults: Faults, roll_out: RollOut, tmp_path: Path) -> None:
    """A timer pushes a broken line into nginx's site and restarts nginx, now and every 25 s (a configuration-management
    run with a bad template). The first run restores the last known good unattended (nginx -t checks it) and the
    repair holds across its settle window; the timer breaks it again; the next run is that heal's relapse with the same
    cause back: escalated with both times of the file and the timer's service that ran since the repair; nothing runs."""
    roll_out("-e", "autoheal_restore_known_good=auto", hosts="node2")
    state = tmp_path / "state"
    heal = (HEAL, "--limit", "node2", *WINDOW, "-e", "autoheal_restore_known_good=auto")
    assert run_playbook(*heal, state_dir=state).rc == 0  # healthy: its configuration kept as its last known good
    faults.inject("node2", "config-rebroken-by-timer", "nginx", "80", SITE, PUSHED, "25")
    first = run_playbook(*heal, state_dir=state)
    assert first.rc == 0 and f"node2: nginx healed in 1 attempt with: sentinel-heal-restore {SITE}" in one_line(first.output), first.output
    assert _down(lab, "node2"), "the timer did not break nginx again"
    ran_before = acted(state, "node2")

    second = run_playbook(*heal, state_dir=state)
    said = one_line(second.output)
    assert second.rc == 2 and "node2 nginx: escalated" in said, second.output
    assert "the same cause is back after the repair (" in said and f"file {SITE}: modified (mtime " in said, second.output
    assert re.search(r"systemd started since the repair: lab-config-push\.service at \S+", said), second.output
    assert acted(state, "node2") == ran_before  # nothing ran for the relapse
    assert [(row["outcome"], row["relapsed_from"] is not None) for row in episodes(state)] == [("healed", False), ("escalated", True)]
