"""The lab booting systemd as PID 1, beside a sysv host: what Ansible sees, a heal on both, the faults only systemd
has (a masked unit, a start limit, a drop-in, its own Restart=), and a clean teardown. Each is judged on the host
(unit state, journal, HTTP) and on the heal result."""

from __future__ import annotations

import os
import re
import subprocess
import sys
import time
from pathlib import Path
from typing import Any, Iterator

import lab_hosts  # tests/lab is not a package
import lab_machine
import pytest
from conftest import ROOT, Faults, acted, commands_run, episodes, evidence_read, one_line, run_playbook, sh

HEAL = "playbooks/heal.yml"


@pytest.fixture(scope="module")
def mixed(lab: Any) -> Iterator[Any]:
    """The session's fleet: node1 and node2 boot systemd, node3 sysv (conftest.SESSION_FLEET)."""
    yield lab


def unit(lab: Any, host: str, name: str, *properties: str) -> dict[str, str]:
    shown = sh(lab, host, "systemctl", "show", name, "--property=" + ",".join(properties))
    return dict(line.split("=", 1) for line in shown.splitlines() if "=" in line)


def remediations(state_dir: Path, host: str) -> list[list[str]]:
    return [argv for purpose, argv in commands_run(state_dir, host) if purpose == "remediation"]


def _ansible_facts(host_pattern: str, fact: str) -> dict[str, str]:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1")
    run = subprocess.run([str(Path(sys.executable).parent / "ansible"), "-i", "inventories/lab", host_pattern, "-m", "setup",
                          "-a", f"filter={fact}"], capture_output=True, text=True, check=True, cwd=ROOT, env=env)
    return dict(re.findall(rf"(node\d) \| SUCCESS.*?{fact}\W+(\w+)", run.stdout, re.DOTALL))


def test_hosts_boot_the_init_they_were_given_and_ansible_sees_it(mixed: Any) -> None:
    assert {status.name: (status.init_system, status.suite) for status in mixed.status()} == {
        "node1": ("systemd", "bookworm"), "node2": ("systemd", "bookworm"), "node3": ("sysv", "trixie")}
    assert _ansible_facts("all", "ansible_service_mgr") == {"node1": "systemd", "node2": "systemd", "node3": "tini"}
    for host in ("node1", "node2"):
        assert sh(mixed, host, "systemctl", "is-system-running").strip() == "running"
        assert sh(mixed, host, "systemctl", "--failed", "--no-legend").strip() == ""
        # the services run as the units Debian ships, the cluster as its instance of postgresql@
        assert sh(mixed, host, "systemctl", "is-active", "nginx", "postgresql@15-main", "redis-server", "ssh").split() == ["active"] * 4
        assert "Started nginx.service" in sh(mixed, host, "journalctl", "-b", "--no-pager", "-o", "cat", "-u", "nginx")
    assert sh(mixed, "node3", "cat", "/proc/1/comm").strip() == "tini"


def test_a_killed_nginx_is_healed_on_a_systemd_host_and_on_a_sysv_host(mixed: Any, tmp_path: Path) -> None:
    faults = Faults(mixed)
    try:
        for host in ("node1", "node3"):
            faults.inject(host, "nginx-killed")
        # systemd noticed on its own: the unit failed (nginx's unit does not restart itself)
        assert sh(mixed, "node1", "systemctl", "is-failed", "nginx").strip() == "failed"
        run = run_playbook(HEAL, state_dir=tmp_path)
        assert run.rc == 0, run.output
        output = one_line(run.output)
        assert "node1: nginx healed in 1 attempt" in output and "node3: nginx healed in 1 attempt" in output
        for host in ("node1", "node3"):
            assert "200" in sh(mixed, host, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/")
        assert sh(mixed, "node1", "systemctl", "is-active", "nginx").strip() == "active"
    finally:
        faults.undo_all()


def test_a_unit_a_person_masked_is_left_alone_and_stays_masked(mixed: Any, tmp_path: Path) -> None:
    sh(mixed, "node1", "systemctl", "mask", "--now", "nginx")
    try:
        run = run_playbook(HEAL, "--limit", "node1", state_dir=tmp_path)
        # a person's decision is not a failure of the job: nothing ran, and the summary says why
        assert run.rc == 0, run.output
        assert "node1: nginx masked: nginx: nginx.service is masked by a person: not healed, nothing run" in one_line(run.output)
        assert "[diagnose > left_alone]" in one_line(run.output)
        assert not (tmp_path / "runs" / "node1").exists()
        assert sh(mixed, "node1", "systemctl", "is-enabled", "nginx").strip() == "masked"
        assert sh(mixed, "node1", "systemctl", "is-active", "nginx").strip() == "inactive"
    finally:
        sh(mixed, "node1", "systemctl", "unmask", "nginx")
        sh(mixed, "node1", "systemctl", "start", "nginx")


def test_a_unit_past_its_start_limit_is_reset_and_started_once(mixed: Any, faults: Faults, tmp_path: Path) -> None:
    faults.inject("node1", "nginx-start-limit")
    assert unit(mixed, "node1", "nginx", "Result", "ActiveState") == {"Result": "start-limit-hit", "ActiveState": "failed"}
    assert "start of the service was attempted too often" in sh(mixed, "node1", "systemctl", "start", "nginx")
    run = run_playbook(HEAL, "--limit", "node1", state_dir=tmp_path)
    assert run.rc == 0 and "node1: nginx healed in 1 attempt with: systemctl reset-failed nginx; systemctl start nginx" \
        " [plan from runbook systemd-start-limit-hit]" in one_line(run.output), run.output
    [episode] = episodes(tmp_path)
    assert episode["failure_class"] == "start_limit_hit" and "its last run ended cleanly" in episode["error_text"]
    assert remediations(tmp_path, "node1") == [["systemctl", "reset-failed", "nginx"], ["systemctl", "start", "nginx"]]
    assert unit(mixed, "node1", "nginx", "ActiveState", "Result") == {"ActiveState": "active", "Result": "success"}
    assert "200" in sh(mixed, "node1", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/")


def test_a_drop_in_naming_a_missing_file_escalates_at_once_with_the_journals_line(mixed: Any, faults: Faults, tmp_path: Path) -> None:
    faults.inject("node2", "nginx-dropin-missing-file")
    run = run_playbook(HEAL, "--limit", "node2", state_dir=tmp_path)
    assert run.rc == 2 and run.recap["node2"]["failed"] == 1, run.output
    output = one_line(run.output)
    assert "node2 nginx: escalated after 1 attempt(s) [diagnose > plan > record > escalate]" in output
    assert 'open() "/etc/nginx/site-prod.conf" failed (2: No such file or directory)' in output
    [episode] = episodes(tmp_path)
    assert (episode["outcome"], episode["plan_reference"]) == ("escalated", "required-path-missing")
    assert "its drop-ins: /etc/systemd/system/nginx.service.d/lab-site-prod.conf" in episode["error_text"]
    # nginx -t (the default file passes) was read, nothing restarted nginx, and the drop-in is as the person left it
    assert acted(tmp_path, "node2") == [] and evidence_read(tmp_path, "node2") == [["nginx", "-t"]]
    assert unit(mixed, "node2", "nginx", "ActiveState", "NRestarts") == {"ActiveState": "failed", "NRestarts": "0"}
    assert "site-prod.conf" in sh(mixed, "node2", "cat", "/etc/systemd/system/nginx.service.d/lab-site-prod.conf")


def test_a_unit_stuck_in_its_own_restart_loop_is_escalated_with_the_cause_and_not_restarted(
    mixed: Any, faults: Faults, tmp_path: Path,
) -> None:
    faults.inject("node1", "redis-restart-loop")
    before = unit(mixed, "node1", "redis-server", "NRestarts", "ActiveState")
    assert before["ActiveState"] == "failed" and int(before["NRestarts"]) > 0
    run = run_playbook(HEAL, "--limit", "node1", state_dir=tmp_path)
    assert run.rc == 2, run.output
    output = one_line(run.output)
    assert "node1 redis: escalated after 1 attempt(s)" in output
    assert "keeps failing under systemd's own Restart=" in output and "Bad directive or wrong number of arguments" in output
    [episode] = episodes(tmp_path)
    assert (episode["failure_class"], episode["plan_reference"]) == ("restart_loop", "systemd-restart-loop")
    assert remediations(tmp_path, "node1") == []
    assert unit(mixed, "node1", "redis-server", "NRestarts", "ActiveState") == before


def test_a_unit_whose_every_run_ends_seconds_after_it_started_is_escalated_as_a_loop_whichever_state_the_check_finds(
    mixed: Any, faults: Faults, tmp_path: Path,
) -> None:
    """RuntimeMaxSec=3 (a recycle meant as 3h) with Restart=always: systemd ends each run of nginx after 3 s and starts
    the next, so nginx answers most of the time and each run outlasts the settle window. The journal of the last minute
    says it is a loop: escalated with the times systemd restarted it and its words, nothing run, nothing remembered as a fix."""
    faults.inject("node1", "service-runtime-limit-loop", "nginx", "80", "3")
    run = run_playbook(HEAL, "--limit", "node1", state_dir=tmp_path)
    output = one_line(run.output)
    assert run.rc == 2 and "node1 nginx: escalated" in output, run.output
    assert re.search(r"unit nginx\.service was restarted \d+ times by systemd's Restart=always in the last 60 s \(the latest at ", output), output
    assert "keeps failing under systemd's own Restart=" in output and "Service reached runtime time limit" in output, output
    [episode] = episodes(tmp_path)
    assert (episode["failure_class"], episode["outcome"]) == ("restart_loop", "escalated")
    assert remediations(tmp_path, "node1") == []


def test_a_unit_whose_runs_outlast_every_look_is_a_loop_by_what_systemd_counted_since_the_check_that_found_it_healthy(
    mixed: Any, faults: Faults, tmp_path: Path,
) -> None:
    """RuntimeMaxSec=30: each run of nginx ends after 30 s, so no minute holds three restarts and most looks find it
    answering. The sweep that found it healthy kept systemd's count on the host; the next sweep, three restarts later,
    counts from it: escalated as a loop with the journal's words, nothing run."""
    faults.inject("node1", "service-runtime-limit-loop", "nginx", "80", "30")
    first = run_playbook(HEAL, "--limit", "node1", state_dir=tmp_path)
    assert first.rc == 0 and "every declared service is healthy" in first.output, first.output
    for _poll in range(100):
        if int(unit(mixed, "node1", "nginx", "NRestarts")["NRestarts"]) >= 3:
            break
        time.sleep(2)
    run = run_playbook(HEAL, "--limit", "node1", state_dir=tmp_path)
    output = one_line(run.output)
    assert run.rc == 2 and "node1 nginx: escalated" in output, run.output
    assert re.search(r"unit nginx\.service was restarted \d+ times by systemd's Restart=always since a check found it healthy at \S+ "
                     r"\(the latest at ", output), output
    assert "Service reached runtime time limit" in output, output
    [episode] = episodes(tmp_path)
    assert (episode["failure_class"], episode["outcome"]) == ("restart_loop", "escalated")
    assert remediations(tmp_path, "node1") == []


def test_a_unit_killed_at_each_restart_into_its_start_limit_is_reset_and_started_once_the_killer_is_gone(
    mixed: Any, faults: Faults, tmp_path: Path,
) -> None:
    """No page for a service that one reset-failed and one start bring back (#52): its runs ended killed, none failed."""
    faults.inject("node1", "service-killed-into-start-limit", "redis-server", "6379")
    before = unit(mixed, "node1", "redis-server", "NRestarts", "ActiveState", "Result")
    assert (before["ActiveState"], before["Result"]) == ("failed", "signal") and int(before["NRestarts"]) > 0, before
    run = run_playbook(HEAL, "--limit", "node1", state_dir=tmp_path)
    output = one_line(run.output)
    assert run.rc == 0 and "node1: redis healed in 1 attempt" in output, run.output
    [episode] = episodes(tmp_path)
    assert (episode["failure_class"], episode["plan_reference"]) == ("restart_loop", "systemd-restart-loop-no-cause")
    assert "PONG" in sh(mixed, "node1", "redis-cli", "ping")


def test_a_unit_that_systemd_restarts_by_itself_is_waited_for_and_nothing_runs(mixed: Any, faults: Faults, tmp_path: Path) -> None:
    faults.inject("node1", "redis-killed-restart-pending")
    assert unit(mixed, "node1", "redis-server", "SubState")["SubState"] == "auto-restart"
    run = run_playbook(HEAL, "--limit", "node1", state_dir=tmp_path)
    assert run.rc == 0 and run.recap["node1"]["changed"] == 0, run.output
    output = one_line(run.output)
    assert "node1 redis: recovered after 0 attempt(s) [diagnose > await_systemd > recovered]" in output
    assert "recovered: redis: systemd's own Restart= brought redis-server back; nothing ran" in output.replace("''", "'")
    assert "node1: redis recovered" in output
    assert episodes(tmp_path) == [] and not (tmp_path / "runs").exists()
    assert sh(mixed, "node1", "redis-cli", "ping").strip() == "PONG"
    assert "Scheduled restart job" in sh(mixed, "node1", "journalctl", "-u", "redis-server", "-b", "--no-pager", "-o", "cat")


def test_redis_killed_on_a_systemd_host_is_back_before_the_check(mixed: Any, faults: Faults, tmp_path: Path) -> None:
    """Debian's redis-server unit has Restart=always (RestartSec=100ms): by the time heal.yml checks, systemd has
    already restarted it, so the run finds every service healthy and does nothing."""
    faults.inject("node2", "redis-killed")
    run = run_playbook(HEAL, "--limit", "node2", state_dir=tmp_path)
    assert run.rc == 0 and "every declared service is healthy" in run.output, run.output
    assert episodes(tmp_path) == []
    assert int(unit(mixed, "node2", "redis-server", "NRestarts")["NRestarts"]) >= 1
    assert sh(mixed, "node2", "redis-cli", "ping").strip() == "PONG"


# a timer of the host's own that is part of nginx's unit (stopped and restarted with it), as a log check or backup is
LOGCHECK_UNITS = {
    "/etc/systemd/system/nginx-logcheck.service": "[Unit]\nDescription=nginx log check\n\n[Service]\nType=oneshot\nExecStart=/bin/true\n",
    "/etc/systemd/system/nginx-logcheck.timer": "[Unit]\nDescription=nginx log check\nPartOf=nginx.service\n\n"
                                                "[Timer]\nOnUnitActiveSec=1h\n\n[Install]\nWantedBy=timers.target\n",
}


def test_a_timer_part_of_the_service_is_left_alone_and_the_service_itself_is_healed(mixed: Any, faults: Faults, tmp_path: Path) -> None:
    """nginx's unit lists the timer in its ConsistsOf= (PartOf=nginx.service): the unit runs nginx itself, so it is no
    umbrella, and the heal restarts nginx, not the timer."""
    for path, text in LOGCHECK_UNITS.items():
        sh(mixed, "node1", "sh", "-c", f"printf '%s' \"$1\" > {path}", "-", text)
    try:
        sh(mixed, "node1", "systemctl", "daemon-reload")
        sh(mixed, "node1", "systemctl", "start", "nginx-logcheck.timer")
        assert "nginx-logcheck.timer" in unit(mixed, "node1", "nginx", "ConsistsOf")["ConsistsOf"]
        timer_before = unit(mixed, "node1", "nginx-logcheck.timer", "ActiveState", "ActiveEnterTimestampMonotonic")
        assert timer_before["ActiveState"] == "active"
        faults.inject("node1", "nginx-killed")
        run = run_playbook(HEAL, "--limit", "node1", state_dir=tmp_path)
        assert run.rc == 0, run.output
        assert "node1: nginx healed in 1 attempt" in one_line(run.output)
        assert sh(mixed, "node1", "systemctl", "is-active", "nginx").strip() == "active"
        assert unit(mixed, "node1", "nginx-logcheck.timer", "ActiveState", "ActiveEnterTimestampMonotonic") == timer_before
        ran = remediations(tmp_path, "node1")
        assert ran and not any("nginx-logcheck" in " ".join(argv) for argv in ran), ran
        assert any(argv[-1] in ("nginx", "nginx.service") for argv in ran), ran
    finally:
        sh(mixed, "node1", "systemctl", "stop", "nginx-logcheck.timer")
        sh(mixed, "node1", "rm", "-f", *LOGCHECK_UNITS)
        sh(mixed, "node1", "systemctl", "daemon-reload")


@pytest.mark.own_fleet  # it takes the fleet down: it runs after the tests on the session's fleet, on whichever fleet is up
def test_down_leaves_no_cgroup_namespace_mount_or_process_of_a_systemd_host(lab: Any) -> None:
    init_pids = [status.pid for status in lab.status() if status.init_system == "systemd"]
    assert lab_hosts.lab_cgroups(), "a systemd host lives in a cgroup of its own"
    lab.down()
    assert lab_hosts.lab_cgroups() == []
    assert lab_hosts.lab_netns() == [] and lab_machine.mounts_under(lab.STATE_DIR) == []
    assert not any(Path(f"/proc/{pid}").exists() for pid in init_pids)
