"""The limits an operator sets once, on the lab. The kill switch: thrown with playbooks/suspend.yml, no remediation
starts on any path (a scheduled heal, an approved plan); checks, evidence reads and check mode still run; resumed,
healing goes on. The flapping limit: a service remediated again and again is left for a person, across jobs."""

from __future__ import annotations

import json
import re
import sqlite3
import time
from pathlib import Path
from typing import Any

from conftest import Faults, acted, commands_run, episodes, evidence_read, one_line, run_playbook, sh

HEAL = "playbooks/heal.yml"
# Every plan waits for a person, with the policy the lab's executors enforce: the plan to start nginx waits.
REVIEW = ("-e", "autoheal_mode=review")


def plan_status(state: Path, plan_id: str) -> str:
    with sqlite3.connect(state / "memory.sqlite3") as conn:
        return str(conn.execute("SELECT status FROM plans WHERE plan_id = ?", (plan_id,)).fetchone()[0])


def test_a_suspended_fleet_reads_but_does_not_remediate_until_resumed(lab: Any, faults: Faults, tmp_path: Path) -> None:
    state = tmp_path / "state"
    faults.inject("node1", "nginx-killed")
    waiting = run_playbook(HEAL, "--limit", "node1", *REVIEW, state_dir=state)
    [plan_id] = re.findall(r"awaits approval of plan ([0-9a-f]{32})", waiting.output)

    thrown = run_playbook("playbooks/suspend.yml", "-e", "reason='database failover'", "-e", "by=alice", state_dir=state)
    assert thrown.rc == 0 and "healing is SUSPENDED: alice (database failover)" in one_line(thrown.output), thrown.output

    # an approval does not run while suspended, and the plan still waits
    approved = run_playbook("playbooks/approve.yml", "-e", f"plan_id={plan_id}", "-e", "approver=bob", state_dir=state)
    assert approved.rc == 2 and "no approved plan runs while it is suspended" in one_line(approved.output), approved.output
    assert plan_status(state, plan_id) == "pending"

    # the scheduled heal checks and reads, and runs nothing
    run = run_playbook(HEAL, "--limit", "node1", state_dir=state)
    assert run.rc == 0, run.output
    output = one_line(run.output)
    assert "node1: nginx suspended: nginx: autonomous remediation is suspended by alice at" in output
    assert "database failover; nothing ran" in output and "[diagnose > plan > guard > rollout > execute > record > suspended]" in output
    # read twice, nothing ran
    assert acted(state, "node1") == [] and evidence_read(state, "node1") == [["nginx", "-t"]] * 2
    assert episodes(state)[-1]["outcome"] == "suspended"
    assert sh(lab, "node1", "systemctl", "is-failed", "nginx").strip() == "failed"
    check = run_playbook(HEAL, "--limit", "node1", "--check", state_dir=tmp_path / "check")
    # (nginx -t, read twice, has left an empty /run/nginx.pid behind: the plan removes it too)
    assert "nginx would be planned (check mode):" in one_line(check.output) and "systemctl start nginx" in one_line(check.output)

    released = run_playbook("playbooks/suspend.yml", "-e", "resume=true", "-e", "by=carol", state_dir=state)
    assert released.rc == 0 and "healing runs (not suspended)" in one_line(released.output), released.output
    approved = run_playbook("playbooks/approve.yml", "-e", f"plan_id={plan_id}", "-e", "approver=bob", state_dir=state)
    assert approved.rc == 0 and "nginx healed in 1 attempt with: systemctl start nginx" in one_line(approved.output), approved.output
    assert plan_status(state, plan_id) == "executed"
    assert "200" in sh(lab, "node1", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/")


RESET = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: A person looked at it
      sentinel.heal.flapping_reset: {host: node2, service: nginx, decided_by: alice, state_dir: "{{ autoheal_state_dir }}"}
"""


def test_a_service_remediated_again_and_again_is_left_for_a_person_until_reset(lab: Any, faults: Faults, tmp_path: Path) -> None:
    state = tmp_path / "state"
    limit = ("--limit", "node2", "-e", "autoheal_flap_limit=2")
    for _job in range(2):  # two jobs (cron, EDA, ...): the count is kept in memory, not in a job
        faults.inject("node2", "nginx-killed")
        run = run_playbook(HEAL, *limit, state_dir=state)
        assert run.rc == 0 and "node2: nginx healed in 1 attempt" in one_line(run.output), run.output
    faults.inject("node2", "nginx-killed")
    flapping = run_playbook(HEAL, *limit, state_dir=state)
    output = one_line(flapping.output)
    assert flapping.rc == 2 and "node2 nginx: escalated after 0 attempt(s) [diagnose > record > escalate]" in output, flapping.output
    assert "nginx: flapping: remediated 2 times in the last 60 min (episodes 1, 2; the limit is 2: flap_limit=2, flap_window=3600)" in output
    assert [purpose for purpose, _argv in commands_run(state, "node2")].count("remediation") == 2
    assert "the flapping limit holds until " in output and "to lift it now: sentinel.heal.flapping_reset host=node2 service=nginx" in output
    # the refusal is an episode of its own, and no remediation
    assert sorted(row["outcome"] for row in episodes(state)) == ["flapping", "healed", "healed"]
    assert sh(lab, "node2", "systemctl", "is-failed", "nginx").strip() == "failed"

    (tmp_path / "reset.yml").write_text(RESET)
    assert run_playbook(str(tmp_path / "reset.yml"), state_dir=state).rc == 0
    healed = run_playbook(HEAL, *limit, state_dir=state)
    assert healed.rc == 0 and "node2: nginx healed in 1 attempt" in one_line(healed.output), healed.output


def test_the_blast_radius_defers_the_hosts_over_the_cap_and_a_later_run_takes_them_up(lab: Any, faults: Faults, tmp_path: Path) -> None:
    state = tmp_path / "state"
    for host in ("node1", "node2", "node3"):
        faults.inject(host, "nginx-killed")
    # the whole lab failing alike would be one fleet incident (test_fleet_scale_lab.py): here the cap is on its own
    capped = run_playbook(HEAL, "-f", "3", "-e", "autoheal_max_hosts_per_run=1", "-e", "autoheal_fleet_min_percent=0", state_dir=state)
    output = one_line(capped.output)
    assert capped.rc == 0, capped.output  # deferred is not a failure: the next run takes it up
    outcomes = {row["host"]: row["outcome"] for row in episodes(state)}
    assert sorted(outcomes.values()) == ["deferred", "deferred", "healed"], outcomes
    deferred = [host for host, outcome in outcomes.items() if outcome == "deferred"]
    for host in deferred:
        assert (f"{host}: nginx deferred: nginx: deferred, nothing ran: this run already remediated 1 hosts (the cap per run is 1);"
                " the next run takes it up") in output, output
    assert all(not [argv for purpose, argv in commands_run(state, host) if purpose == "remediation"] for host in deferred)

    # another job holds the only slot of remediations at once: nothing starts; once its lease expired, this one does
    with sqlite3.connect(state / "memory.sqlite3") as conn:
        conn.execute("INSERT INTO leases (run_id, host, service, acquired_at, expires_at) VALUES ('other-job', 'node9', 'nginx', 0, 4e9)")
    held = run_playbook(HEAL, "--limit", deferred[0], "-e", "autoheal_max_running=1", state_dir=state)
    assert "1 remediations are running (the cap on remediations at the same time is 1)" in one_line(held.output), held.output
    with sqlite3.connect(state / "memory.sqlite3") as conn:
        conn.execute("UPDATE leases SET expires_at = 1 WHERE run_id = 'other-job'")
    later = run_playbook(HEAL, "-f", "1", "-e", "autoheal_max_running=1", state_dir=state)  # one host after the other
    assert later.rc == 0 and one_line(later.output).count("nginx healed in 1 attempt") == 2, later.output
    with sqlite3.connect(state / "memory.sqlite3") as conn:
        assert conn.execute("SELECT count(*) FROM leases").fetchone() == (0,)  # every slot was given back


def test_a_service_a_person_silenced_stays_as_they_left_it_on_every_path_until_the_silence_ends(
        lab: Any, faults: Faults, tmp_path: Path) -> None:
    state = tmp_path / "state"
    faults.inject("node2", "nginx-killed")  # stopped, as by a person who works on the host
    waiting = run_playbook(HEAL, "--limit", "node2", *REVIEW, state_dir=state)
    [plan_id] = re.findall(r"awaits approval of plan ([0-9a-f]{32})", waiting.output)
    silenced_at = time.time()
    silence = run_playbook("playbooks/silence.yml", "-e", "by=alice", "-e", "target=node2", "-e", "service=nginx", "-e", "duration=30s",
                           "-e", "reason='swapping the disk'", state_dir=state)
    assert silence.rc == 0, silence.output

    # an approval given now does not run, and the plan still waits
    approved = run_playbook("playbooks/approve.yml", "-e", f"plan_id={plan_id}", "-e", "approver=bob", state_dir=state)
    assert approved.rc == 2 and "nginx on node2: silenced by alice (silence 1): swapping the disk" in one_line(approved.output), approved.output
    assert plan_status(state, plan_id) == "pending"
    # the scheduled heal checks and reports, and plans and runs nothing
    run = run_playbook(HEAL, "--limit", "node2", state_dir=state)
    output = one_line(run.output)
    assert run.rc == 0 and "node2: nginx silenced: nginx: silenced by alice (silence 1): swapping the disk" in output, run.output
    assert "checked, nothing planned or run; the silence limit holds until" in output and "[diagnose > record > silenced]" in output
    assert "to lift it now: sentinel.heal.silence state=absent silence_id=1 decided_by=YOU" in output
    assert sorted(row["outcome"] for row in episodes(state)) == ["awaiting_approval", "silenced"]  # the refusal only
    assert [purpose for purpose, _argv in commands_run(state, "node2") if purpose == "remediation"] == []
    assert sh(lab, "node2", "systemctl", "is-active", "nginx").strip() != "active"

    time.sleep(max(0.0, silenced_at + 32 - time.time()))  # the silence ends: the next run heals as usual
    healed = run_playbook(HEAL, "--limit", "node2", state_dir=state)
    assert healed.rc == 0 and "node2: nginx healed in 1 attempt" in one_line(healed.output), healed.output


def test_a_maintenance_marker_left_on_the_host_holds_healing_and_a_malformed_one_holds_it_with_a_warning(
        lab: Any, faults: Faults, tmp_path: Path) -> None:
    state = tmp_path / "state"
    marker = "/etc/sentinel-heal/maintenance"
    faults.inject("node1", "nginx-killed")
    try:
        sh(lab, "node1", "sh", "-c", f"mkdir -p /etc/sentinel-heal && printf 'reason: new disk\\nby: alice\\nservices: nginx\\n' > {marker}")
        held = run_playbook(HEAL, "--limit", "node1", state_dir=state)
        output = one_line(held.output)
        assert held.rc == 0, held.output
        assert f"node1: nginx silenced: nginx: in maintenance by alice until it is removed ({marker}): new disk" in output, output
        sh(lab, "node1", "sh", "-c", f"printf 'until: after lunch\\n' > {marker}")
        malformed = run_playbook(HEAL, "--limit", "node1", state_dir=state)
        output = one_line(malformed.output)
        assert f"held back: the host's maintenance marker {marker} line 1: until 'after lunch' is not an ISO 8601 time" in output, output
        assert f"[WARNING]: node1: the maintenance marker {marker} line 1" in output
        # each refusal is an episode, and nothing ran
        assert [row["outcome"] for row in episodes(state)] == ["silenced"] * 2
        assert sh(lab, "node1", "systemctl", "is-active", "nginx").strip() != "active"
    finally:
        sh(lab, "node1", "rm", "-f", marker)

    # a maintenance window declared in the inventory that covers now, and one that cannot be read
    hour_ago, hour_on = (time.strftime("%H:%M", time.gmtime(time.time() + shift)) for shift in (-3600, 3600))
    window = {"name": "patching", "start": hour_ago, "end": hour_on, "timezone": "UTC", "services": ["nginx"]}
    declared = run_playbook(HEAL, "--limit", "node1", "-e", json.dumps({"autoheal_maintenance_windows": [window]}), state_dir=state)
    assert f"nginx: in the maintenance window 'patching' (daily {hour_ago}-{hour_on} UTC); checked" in one_line(declared.output), declared.output
    unreadable = run_playbook(HEAL, "--limit", "node1", "-e", json.dumps({"autoheal_maintenance_windows": [dict(window, timezone="Mars/Olympus")]}),
                              state_dir=state)
    assert unreadable.rc == 2 and ("not a time zone this controller knows; field: maintenance_windows[0].timezone; value: 'Mars/Olympus'"
                                   in one_line(unreadable.output)), unreadable.output
    # the window's refusal is an episode; a window that cannot be read stops the task before the loop
    assert [row["outcome"] for row in episodes(state)] == ["silenced"] * 3
    assert sh(lab, "node1", "systemctl", "is-active", "nginx").strip() != "active"
    healed = run_playbook(HEAL, "--limit", "node1", state_dir=state)
    assert healed.rc == 0 and "node1: nginx healed in 1 attempt" in one_line(healed.output), healed.output


def test_observe_mode_leaves_a_broken_service_and_says_what_it_would_run_and_review_mode_waits_for_a_person(
        lab: Any, faults: Faults, tmp_path: Path) -> None:
    state = tmp_path / "state"
    faults.inject("node1", "nginx-killed")
    observed = run_playbook(HEAL, "--limit", "node1", "-e", "autoheal_mode=observe", state_dir=state)
    output = one_line(observed.output)
    assert observed.rc == 0 and "node1: nginx observed: nginx: observe mode, nothing ran and nothing waits: the plan from" in output, output
    assert "would be allow:" in output and "systemctl start nginx" in output
    assert [argv for purpose, argv in commands_run(state, "node1") if purpose == "remediation"] == [] and episodes(state) == []
    assert sh(lab, "node1", "systemctl", "is-active", "nginx").strip() != "active"

    reviewed = run_playbook(HEAL, "--limit", "node1", "-e", "autoheal_mode=review", state_dir=state)
    output = one_line(reviewed.output)
    assert "review mode: a human approves every plan, even one the policy allows" in output, reviewed.output
    [plan_id] = re.findall(r"awaits approval of plan ([0-9a-f]{32})", reviewed.output)
    assert sh(lab, "node1", "systemctl", "is-active", "nginx").strip() != "active"
    approved = run_playbook("playbooks/approve.yml", "-e", f"plan_id={plan_id}", "-e", "approver=bob", state_dir=state)
    assert approved.rc == 0 and "nginx healed in 1 attempt" in one_line(approved.output), approved.output
