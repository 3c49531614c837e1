"""Faults sentinel.heal survives, on the lab: a job killed with SIGKILL mid-remediation, a host whose link is cut
mid-run (and one unreachable from the start), and a controller state dir that is full, read-only or locked. After
each, memory is whole (every episode complete or absent, PRAGMA integrity_check ok) and the next run heals."""

from __future__ import annotations

import os
import signal
import sqlite3
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import Any, Iterator

import pytest
from conftest import ROOT, Faults, RollOut, episodes, one_line, run_playbook, sh, slow_plan, wait_for

HEAL = "playbooks/heal.yml"


def controller_processes(word: str) -> list[int]:
    """Processes on the controller with the word in their command line."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and proc.name != str(os.getpid()):
            try:
                if word.encode() in (proc / "cmdline").read_bytes():
                    found.append(int(proc.name))
            except OSError:
                continue
    return found


def integrity(state: Path) -> str:
    with sqlite3.connect(state / "memory.sqlite3") as conn:
        return str(conn.execute("PRAGMA integrity_check").fetchone()[0])


def leases(state: Path) -> int:
    with sqlite3.connect(state / "memory.sqlite3") as conn:
        return int(conn.execute("SELECT count(*) FROM leases").fetchone()[0])


def test_a_job_killed_mid_remediation_leaves_nothing_running_and_the_next_run_records_it_and_heals(
        lab: Any, faults: Faults, roll_out: RollOut, tmp_path: Path) -> None:
    state = tmp_path / "state"
    plan = slow_plan(tmp_path, 40)
    roll_out(*plan)
    faults.inject("node1", "nginx-killed")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    command = ["ansible-playbook", HEAL, "-i", "inventories/lab", "--limit", "node1", "-e", f"autoheal_state_dir={state}",
               *plan]
    job = subprocess.Popen(command, cwd=ROOT, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True)
    try:
        assert wait_for(lambda: "sleep 40" in sh(lab, "node1", "ps", "-eo", "args"), 90), "the remediation never started"
        os.killpg(job.pid, signal.SIGKILL)  # the job's process group, as a terminal's kill -9 or a scheduler does
        job.wait()
        # the run's ansible-playbook and the job's worker (each a session of its own) are gone too
        assert wait_for(lambda: not controller_processes(str(state)), 30), [
            Path(f"/proc/{pid}/cmdline").read_bytes() for pid in controller_processes(str(state))]
    finally:
        for pid in controller_processes(str(state)):
            os.kill(pid, signal.SIGKILL)
    assert episodes(state) == [] and leases(state) == 1  # nothing half-written: the lease tells what was interrupted

    roll_out.undo()  # the next run heals with the lab's own policy
    run = run_playbook(HEAL, "--limit", "node1", state_dir=state)
    output = one_line(run.output)
    assert run.rc == 0, run.output
    assert ("node1: nginx remediation of an earlier job interrupted (episode 1): interrupted: its job ended during the "
            "remediation; it had started sleep 40") in output, output
    assert "node1: nginx healed in 1 attempt" in output
    interrupted, healed = episodes(state)
    assert (interrupted["outcome"], healed["outcome"]) == ("interrupted", "healed")
    assert [step["status"] for step in interrupted["results"]["steps"]] == ["interrupted", "skipped"]
    assert leases(state) == 0 and integrity(state) == "ok"
    assert "200" in sh(lab, "node1", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/")


@pytest.fixture
def link_cuts(lab: Any) -> Iterator[list[str]]:
    cut: list[str] = []
    yield cut
    for host in cut:
        lab.cut_link(host, cut=False)


def test_a_host_cut_off_mid_run_ends_unreachable_and_every_other_host_is_healed(
        lab: Any, faults: Faults, link_cuts: list[str], roll_out: RollOut, tmp_path: Path) -> None:
    state = tmp_path / "state"
    plan = slow_plan(tmp_path, 8)
    roll_out(*plan)
    for host in ("node1", "node2"):
        faults.inject(host, "nginx-killed")
    lab.cut_link("node3")  # unreachable before healing
    link_cuts.append("node3")

    def cut_node1_mid_remediation() -> None:
        if wait_for(lambda: "sleep 8" in sh(lab, "node1", "ps", "-eo", "args"), 90):
            lab.cut_link("node1")
            link_cuts.append("node1")

    cutter = threading.Thread(target=cut_node1_mid_remediation)
    cutter.start()
    began = time.monotonic()
    run = run_playbook(HEAL, "-f", "3", *plan, state_dir=state)
    took = time.monotonic() - began
    cutter.join()
    output = one_line(run.output)
    assert "node1" in link_cuts, "node1's link was never cut"
    assert run.recap["node3"]["unreachable"] == 1 and run.recap["node2"]["failed"] == 0, run.output
    assert "node2: nginx healed in 1 attempt" in output, output
    assert "node1: nginx unreachable: the host did not answer" in output, output
    outcomes = {row["host"]: row["outcome"] for row in episodes(state)}
    assert outcomes == {"node1": "unreachable", "node2": "healed"}, outcomes
    # the keepalive noticed the cut link within seconds: nobody waited out the step's timeout (120 s)
    assert took < 120, f"the job took {took:.0f} s"
    assert leases(state) == 0 and integrity(state) == "ok"

    for host in list(link_cuts):
        lab.cut_link(host, cut=False)
        link_cuts.remove(host)
    again = run_playbook(HEAL, "--limit", "node1", *plan, state_dir=state)  # (memory replays node2's fix)
    assert again.rc == 0 and "node1: nginx healed" in one_line(again.output), again.output


@pytest.fixture
def small_filesystem(tmp_path: Path) -> Iterator[Path]:
    """A 4 MiB tmpfs for the state dir, unmounted afterwards."""
    state = tmp_path / "state"
    state.mkdir()
    subprocess.run(["mount", "-t", "tmpfs", "-o", "size=4m", "sentinel-heal-test", str(state)], check=True)
    try:
        yield state
    finally:
        subprocess.run(["umount", "-l", str(state)], check=False)


def test_a_full_or_read_only_or_locked_state_dir_stops_the_run_with_what_to_do_and_the_next_run_heals(
        lab: Any, faults: Faults, small_filesystem: Path) -> None:
    state = small_filesystem
    faults.inject("node1", "nginx-killed")
    filler = state / "filler"
    subprocess.run(["dd", "if=/dev/zero", f"of={filler}", "bs=64k"], capture_output=True, check=False)  # until it is full
    full = run_playbook(HEAL, "--limit", "node1", state_dir=state)
    output = one_line(full.output)
    assert full.rc == 2 and f"the filesystem of {state} is full or failing" in output, full.output
    assert "point autoheal_state_dir (state_dir) at another filesystem" in output
    assert sh(lab, "node1", "systemctl", "is-failed", "nginx").strip() == "failed"  # nothing ran

    filler.unlink()
    first = run_playbook(HEAL, "--limit", "node1", state_dir=state)
    assert first.rc == 0 and "node1: nginx healed" in one_line(first.output), first.output

    faults.inject("node1", "nginx-killed")
    subprocess.run(["mount", "-o", "remount,ro", str(state)], check=True)
    try:
        read_only = run_playbook(HEAL, "--limit", "node1", state_dir=state)
    finally:
        subprocess.run(["mount", "-o", "remount,rw", str(state)], check=True)
    output = one_line(read_only.output)
    assert read_only.rc == 2 and "the state dir is on a read-only filesystem; field: state_dir" in output, read_only.output
    assert f"fix: remount {state}'s filesystem read-write, or point autoheal_state_dir" in output  # found before any check
    assert sh(lab, "node1", "systemctl", "is-failed", "nginx").strip() == "failed"

    # another job holds the memory's write lock past the busy timeout (30 s): the remediation does not start
    other_job = sqlite3.connect(state / "memory.sqlite3", isolation_level=None)
    other_job.execute("BEGIN IMMEDIATE")
    try:
        locked = run_playbook(HEAL, "--limit", "node1", state_dir=state)
    finally:
        other_job.execute("ROLLBACK")
        other_job.close()
    output = one_line(locked.output)
    assert locked.rc == 2 and "cannot write to the memory (database is locked); nothing was written" in output, locked.output
    assert f"another process held the memory's write lock for more than 30 s: find it (fuser {state / 'memory.sqlite3'})" in output
    assert sh(lab, "node1", "systemctl", "is-failed", "nginx").strip() == "failed"

    assert [row["outcome"] for row in episodes(state)] == ["healed"] and integrity(state) == "ok"
    healed = run_playbook(HEAL, "--limit", "node1", state_dir=state)
    assert healed.rc == 0 and "node1: nginx healed" in one_line(healed.output), healed.output


def test_two_runs_at_once_against_one_broken_service_remediate_it_once(lab: Any, faults: Faults, roll_out: RollOut, tmp_path: Path) -> None:
    state = tmp_path / "state"
    # long enough for the second run to start and check while it runs, on a busy controller too
    plan = slow_plan(tmp_path, 20)
    roll_out(*plan)
    faults.inject("node1", "nginx-killed")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    first = subprocess.Popen(["ansible-playbook", HEAL, "-i", "inventories/lab", "--limit", "node1", "-e", f"autoheal_state_dir={state}",
                              *plan], cwd=ROOT, env=env, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        assert wait_for(lambda: "sleep 20" in sh(lab, "node1", "ps", "-eo", "args"), 90), "the first run's remediation never started"
        second = run_playbook(HEAL, "--limit", "node1", *plan, state_dir=state)  # a second sweep, an EDA event, ...
        output = one_line(second.output)
        assert second.rc == 0, second.output
        assert ("node1: nginx in_progress_elsewhere: nginx: in progress elsewhere, nothing ran here: a remediation of nginx on node1 by "
                "another run (ansible-playbook-") in output, output
        first_output, _unused = first.communicate(timeout=300)
    finally:
        first.kill()
    assert first.returncode == 0 and "node1: nginx healed in 1 attempt" in one_line(first_output), first_output
    assert sorted(row["outcome"] for row in episodes(state)) == ["healed", "in_progress_elsewhere"]
    assert leases(state) == 0


def test_a_step_that_hangs_is_killed_at_its_timeout_the_attempt_is_recorded_failed_and_the_loop_goes_on(
        lab: Any, faults: Faults, roll_out: RollOut, tmp_path: Path) -> None:
    state = tmp_path / "state"
    plan = slow_plan(tmp_path, 60)
    roll_out(*plan)
    faults.inject("node1", "nginx-killed")
    began = time.monotonic()
    run = run_playbook(HEAL, "--limit", "node1", "-e", "autoheal_step_timeout=5", *plan, state_dir=state)
    took = time.monotonic() - began
    first, second = episodes(state)
    assert first["outcome"] == "failed", run.output
    assert [step["status"] for step in first["results"]["steps"]] == ["failed", "skipped"]
    assert (first["results"]["steps"][0]["rc"], first["results"]["steps"][0]["stderr"]) == (124, "killed on the host at its timeout of 5 s")
    # the loop went on: the next attempt planned again (the generic restart, which this policy leaves to a person)
    assert second["attempt"] == 2 and second["outcome"] == "awaiting_approval", second
    assert took < 60, f"the job took {took:.0f} s"  # nobody waited for the hanging step
    assert wait_for(lambda: "sleep 60" not in sh(lab, "node1", "ps", "-eo", "args"), 15), "the hanging step still runs on the host"
