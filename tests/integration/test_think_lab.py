"""The think loop on the lab: faults whose cause no check shows and only a read of the unit (and of what it names) does,
healed by a scripted model that plans from what it read, through the real playbook, ansible-runner and systemd; and
escalated with their cause when the loop is off. The shipped runbooks read too: a missing working directory."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from conftest import Faults, acted, episodes, one_line, run_playbook, sh
from llm_server import ScriptedLLM, reads_then_plans

HEAL = "playbooks/heal.yml"
# fault: (host, service as declared, unit, a command that answers when the service is back)
FAULTS = {
    "redis-prestart-dir-owner": ("node1", "redis", "redis-server", ("redis-cli", "ping"), "PONG"),
    "postgres-prestart-dir-owner": ("node2", "postgresql", "postgresql@15-main", ("pg_isready", "-h", "127.0.0.1"), "accepting connections"),
    "nginx-workdir-gone": ("node1", "nginx", "nginx", ("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/"), "200"),
}


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM(respond=reads_then_plans) as server:
        yield server


def _llm_vars(llm: ScriptedLLM, **extra: Any) -> str:
    options = {"model": "scripted-sre", "base_url": llm.base_url, "api_key": "sk-lab", "timeout": 5, "max_retries": 1}
    return json.dumps({"autoheal_llm": options, "autoheal_builtin_runbooks": False, **extra})


def _answers(lab: Any, host: str, probe: tuple[str, ...], expected: str) -> bool:
    for _try in range(20):
        if expected in sh(lab, host, *probe):
            return True
        time.sleep(0.5)
    return False


@pytest.mark.parametrize("fault", FAULTS)
def test_a_fault_only_a_read_explains_is_healed_from_what_the_model_read(
    lab: Any, faults: Faults, llm: ScriptedLLM, tmp_path: Path, fault: str,
) -> None:
    host, service, unit, probe, expected = FAULTS[fault]
    faults.inject(host, fault)
    run = run_playbook(HEAL, "--limit", host, "-e", _llm_vars(llm), state_dir=tmp_path)
    output = one_line(run.output)
    assert run.rc == 0 and f"{service} healed in 1 attempt" in output and "plan > observe > plan" in output, run.output
    assert _answers(lab, host, probe, expected)
    [episode] = [e for e in episodes(tmp_path) if e["service"] == service]
    reads = [read for round_ in episode["results"]["reads"] for read in round_["reads"]]
    assert reads[0]["argv"] == ["systemctl", "cat", unit] and all(read["outcome"] == "ran" and read["decision"] == "allow" for read in reads)
    # nothing outside the guard: every command ansible-runner ran was a read the guard allowed, or an allowed step of the plan
    allowed = {tuple(read["argv"]) for read in reads} | {tuple(v["argv"]) for v in episode["verdicts"] if v["decision"] == "allow"}
    ran = acted(tmp_path, host)
    assert ran and all(tuple(argv) in allowed for _purpose, argv in ran), (ran, allowed)
    assert [purpose for purpose, _argv in ran].count("investigate") == len(reads)


@pytest.mark.parametrize("fault", FAULTS)
def test_with_the_loop_off_the_same_fault_escalates_with_its_cause(lab: Any, faults: Faults, llm: ScriptedLLM, tmp_path: Path, fault: str) -> None:
    host, service, _unit, _probe, _expected = FAULTS[fault]
    faults.inject(host, fault)
    run = run_playbook(HEAL, "--limit", host, "-e", _llm_vars(llm, autoheal_think_rounds=0), state_dir=tmp_path)
    output = one_line(run.output)
    assert run.rc == 2 and f"{service}: escalated" in output and "observe" not in output, run.output
    # in the service's own words where it has any (systemd's CHDIR line), else the start step that failed and the drop-in
    cause = "Failed at step CHDIR spawning /usr/sbin/nginx" if fault == "nginx-workdir-gone" else "ExecStartPre"
    assert cause in output and (fault == "nginx-workdir-gone" or "lab-" in output), run.output
    assert not acted(tmp_path, host)


@pytest.mark.parametrize("rounds", [2, 0])
def test_the_shipped_runbooks_read_the_unit_and_recreate_a_missing_working_directory(
    lab: Any, faults: Faults, tmp_path: Path, rounds: int,
) -> None:
    """No LLM: systemd names the program, not the directory; systemd-start-failed's follow-up read (`systemctl cat`)
    names WorkingDirectory=/var/log/postgresql, which service-directory-missing recreates as Debian's package made it.
    With the loop off, it escalates with the journal's line."""
    faults.inject("node2", "postgres-workdir-gone")
    run = run_playbook(HEAL, "--limit", "node2", "-e", json.dumps({"autoheal_think_rounds": rounds}), state_dir=tmp_path)
    output = one_line(run.output)
    if rounds == 0:
        assert run.rc == 2 and "escalated" in output and "Failed at step CHDIR spawning /usr/bin/pg_ctlcluster" in output, run.output
        assert not acted(tmp_path, "node2")
        return
    assert run.rc == 0 and "postgresql healed in 1 attempt with: install -d -m 1775 -o root -g postgres /var/log/postgresql" in output, run.output
    assert "runbook systemd-start-failed asks to look first (round 1 of 2): systemctl cat postgresql@15-main" in output, run.output
    assert "[diagnose > plan > observe > plan > guard > rollout > execute > verify > record > healed]" in output, run.output
    assert sh(lab, "node2", "stat", "-c", "%U %G %a", "/var/log/postgresql").strip() == "root postgres 1775"
    assert _answers(lab, "node2", ("pg_isready", "-h", "127.0.0.1"), "accepting connections")
    [episode] = episodes(tmp_path)
    [round_] = episode["results"]["reads"]
    assert round_["reference"] == "systemd-start-failed" and "WorkingDirectory=/var/log/postgresql" in round_["reads"][0]["output"]


def test_a_real_small_model_through_the_loop_runs_only_allowed_reads_and_steps_and_ends_in_time(
    lab: Any, faults: Faults, local_llm: Any, tmp_path: Path,
) -> None:
    """SmolLM2-135M-Instruct behind llama.cpp's server (the JSON form: its schema admits a plan or reads), no runbooks:
    whatever it asks, only reads the guard allows as reads ran, only allowed steps ran, nothing it should not touch
    changed, and the incident ended within its deadline."""
    faults.inject("node1", "nginx-workdir-gone")
    untouched = ("md5sum", "/etc/nginx/nginx.conf", "/etc/passwd", "/etc/shadow", "/etc/sudoers",
                 "/etc/systemd/system/nginx.service.d/lab-workdir.conf")
    before = sh(lab, "node1", *untouched)
    options = {"model": local_llm.model, "base_url": local_llm.base_url, "api_key": "local", "schema": "llamacpp", "timeout": 60}
    deadline = 180
    began = time.monotonic()
    settings = {"autoheal_llm": options, "autoheal_builtin_runbooks": False, "autoheal_incident_timeout": deadline}
    run = run_playbook(HEAL, "--limit", "node1", "-e", json.dumps(settings), state_dir=tmp_path)
    took = time.monotonic() - began
    recorded = [episode for episode in episodes(tmp_path) if episode["service"] == "nginx"]
    assert recorded, run.output
    reads = [read for episode in recorded for round_ in (episode["results"] or {}).get("reads") or [] for read in round_["reads"]]
    read_only = {read["rule"] for read in reads if read["outcome"] == "ran"}
    assert all(read["decision"] == "allow" for read in reads if read["outcome"] == "ran"), reads
    allowed = {tuple(read["argv"]) for read in reads if read["outcome"] == "ran"} | {
        tuple(verdict["argv"]) for episode in recorded for verdict in episode["verdicts"] if verdict["decision"] == "allow"}
    ran = acted(tmp_path, "node1")
    assert all(tuple(argv) in allowed for _purpose, argv in ran), (ran, allowed, read_only)
    assert sh(lab, "node1", *untouched) == before
    # the job's own start and the service checks around the incident take the rest
    assert took < deadline + 60, took
    assert any(f"node1 nginx: {status}" in one_line(run.output) for status in ("healed", "escalated", "awaiting_approval")), run.output
