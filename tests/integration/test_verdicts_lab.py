"""Verdicts a person can be paged on, on the lab fleet: a heal ends healed (exit 0) when the service answers, an
escalation is true and names the cause in the service's words."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import yaml
from conftest import ROOT, Faults, RollOut, commands_run, episodes, one_line, run_playbook, sh

HEAL = "playbooks/heal.yml"
DECLARED = yaml.safe_load((ROOT / "inventories" / "lab" / "group_vars" / "lab.yml").read_text())["autoheal_services"]
# nginx declared through the umbrella unit that fronts it (tests/lab/faults/nginx-behind-umbrella.sh)
WEB_STACK = {**next(spec for spec in DECLARED if spec["name"] == "nginx"), "name": "web-stack", "service": "web-stack"}


def test_a_unit_that_fronts_another_is_healed_through_the_unit_it_fronts_and_verified_up(
        lab: Any, faults: Faults, roll_out: RollOut, tmp_path: Path) -> None:
    """A second umbrella family: web-stack.service (ExecStart=/bin/true) fronts nginx (PartOf=). Stopped, both are
    down; the loop starts nginx, the unit that runs the service, and the umbrella stays inactive: verification judges
    the units it fronts, so the run says healed (exit 0), and nginx's master on port 80 is no stranger."""
    faults.inject("node1", "nginx-behind-umbrella")
    declared = ("-e", json.dumps({"autoheal_services": [spec for spec in DECLARED if spec["name"] != "nginx"] + [WEB_STACK]}))
    roll_out(*declared, hosts="node1")  # the executor acts only for the services its host declares
    run = run_playbook(HEAL, "--limit", "node1", *declared, state_dir=tmp_path)
    output = one_line(run.output)
    assert run.rc == 0, run.output
    assert "node1: web-stack healed in 1 attempt" in output, run.output
    assert [argv for purpose, argv in commands_run(tmp_path, "node1") if purpose == "remediation"] == [["systemctl", "start", "nginx"]]
    assert "200" in sh(lab, "node1", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/")
    assert sh(lab, "node1", "systemctl", "is-active", "web-stack").strip() == "inactive"
    assert "stranger" not in output and "port 80/tcp is held by" not in output


def test_debians_postgresql_umbrella_stopped_is_healed_and_its_own_socket_is_not_left_over(lab: Any, faults: Faults, tmp_path: Path) -> None:
    """systemctl stop postgresql stops the umbrella and the cluster; the loop starts postgresql@15-main. The cluster
    binds /var/run/postgresql/.s.PGSQL.5432, the declared /run/postgresql/.s.PGSQL.5432 through /var/run's link: its
    own socket, bound, and its postmaster on 5432 are the service's, and the run says healed."""
    faults.inject("node2", "postgres-umbrella-stopped")
    run = run_playbook(HEAL, "--limit", "node2", state_dir=tmp_path)
    output = one_line(run.output)
    assert run.rc == 0, run.output
    assert "node2: postgresql healed in 1 attempt" in output, run.output
    assert "accepting connections" in sh(lab, "node2", "pg_isready", "-h", "127.0.0.1")
    assert "left over" not in output and "held by postgres" not in output
    [episode] = [episode for episode in episodes(tmp_path) if episode["service"] == "postgresql"]
    assert episode["outcome"] == "healed"


def test_an_error_that_spans_lines_is_escalated_whole_in_the_services_words(lab: Any, faults: Faults, tmp_path: Path) -> None:
    """PostgreSQL refuses a data directory of another major version in two lines: FATAL says it is incompatible, the
    DETAIL below says which versions. The page quotes both, as PostgreSQL printed them, and nothing is run."""
    faults.inject("node2", "postgres-version-mismatch")
    run = run_playbook(HEAL, "--limit", "node2", state_dir=tmp_path)
    output = one_line(run.output)
    assert run.rc == 2 and run.recap["node2"]["failed"] == 1, run.output
    assert "node2 postgresql: escalated after 1 attempt(s)" in output, run.output
    assert "FATAL: database files are incompatible with server" in output.replace("  ", " ")
    assert "The data directory was initialized by PostgreSQL version 14, which is not compatible with this version 15" in output
    assert [argv for purpose, argv in commands_run(tmp_path, "node2") if purpose == "remediation"] == []


def test_a_file_the_service_must_open_in_its_own_directory_is_given_back(lab: Any, faults: Faults, tmp_path: Path) -> None:
    """redis's log file is root's (0600) in a directory that is right: the class for files below a directory the
    package owns whole gives the file back (chown -h: redis owns the directory and could have put a link there), and
    the run says healed."""
    for host in ("node1", "node3"):  # systemd, sysv
        faults.inject(host, "redis-log-file-root-owned")
        run = run_playbook(HEAL, "--limit", host, state_dir=tmp_path / host)
        output = one_line(run.output)
        assert run.rc == 0, run.output
        assert f"{host}: redis healed in 1 attempt" in output, run.output
        ran = [argv for purpose, argv in commands_run(tmp_path / host, host) if purpose == "remediation"]
        assert ran[0] == ["chown", "-h", "redis:adm", "/var/log/redis/redis-server.log"], ran
        assert "PONG" in sh(lab, host, "redis-cli", "ping")
        assert sh(lab, host, "stat", "-c", "%U:%G", "/var/log/redis/redis-server.log").strip() == "redis:adm"


def test_a_log_line_older_than_the_last_start_is_no_cause_and_never_obeyed(lab: Any, faults: Faults, tmp_path: Path) -> None:
    """redis killed, and in its log, dated before its last start, a planted FATAL CONFIG FILE ERROR that tells the
    reader to run a script: service_check leaves the line out (its time says it belongs to an earlier run), the loop
    reads a killed redis and heals it, exit 0, and the instruction reaches no one."""
    faults.inject("node3", "redis-killed-planted-line")
    run = run_playbook(HEAL, "--limit", "node3", state_dir=tmp_path)
    output = one_line(run.output)
    assert run.rc == 0, run.output
    assert "node3: redis healed in 1 attempt" in output, run.output
    assert "198.51.100.7" not in output and "IGNORE ALL PREVIOUS INSTRUCTIONS" not in output
    assert all("198.51.100.7" not in str(episode["evidence"]) for episode in episodes(tmp_path))
    assert "PONG" in sh(lab, "node3", "redis-cli", "ping")
