"""The executor against real ansible-runner runs on this machine (the local connection)."""

from __future__ import annotations

import multiprocessing
import os
import signal
import sys
import time
from pathlib import Path

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ExecutorError, JobGone
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.leash import Leash
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.runner import RunnerExecutor, _with_keepalive, steps_started
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.steps import RunReport, RunStep, Target

LOCAL = Target(name="localhost", host_vars={"ansible_connection": "local", "ansible_python_interpreter": sys.executable})
# an argv no other process on the machine has, to find the step's process by
MARKER = "61.4321"


def _parent(pid: int) -> int | None:
    try:
        # the command name, in parentheses, may hold spaces: the fields after it are plain
        return int((Path("/proc") / str(pid) / "stat").read_text().rsplit(")", 1)[1].split()[1])
    except (OSError, IndexError, ValueError):
        return None


def _processes_with(word: str) -> list[int]:
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit():
            try:
                argv = (proc / "cmdline").read_bytes().split(b"\0")
            except OSError:
                continue
            if word.encode() in argv:
                found.append(int(proc.name))
    return found


def _run_in_child(root: Path) -> None:
    RunnerExecutor(root).run(LOCAL, [RunStep(argv=("true",), become=False), RunStep(argv=("sleep", MARKER), become=False)],
                             purpose="remediation", started=(root / "run_dir").write_text)


def _processes_mentioning(text: str) -> list[str]:
    """The command lines of the processes any of whose arguments contains ``text``."""
    found = []
    for proc in Path("/proc").iterdir():
        if proc.name.isdigit() and int(proc.name) != os.getpid():
            try:
                argv = (proc / "cmdline").read_bytes().decode(errors="replace").split("\0")
            except OSError:
                continue
            if any(text in arg for arg in argv):
                found.append(" ".join(argv))
    return found


def _wait_for(condition: object, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():  # type: ignore[operator]
            return True
        time.sleep(0.1)
    return False


def test_a_run_dies_with_the_process_that_started_it_and_tells_what_had_started(tmp_path: Path) -> None:
    child = multiprocessing.get_context("fork").Process(target=_run_in_child, args=(tmp_path,))
    child.start()
    try:
        assert _wait_for(lambda: _processes_with(MARKER), 60), "the step never started"
        os.kill(child.pid or 0, signal.SIGKILL)  # as a job killed with SIGKILL: nothing of it runs on
        child.join()
        # the step's process and the run's ansible-playbook go with it (the leash kills their session)
        assert _wait_for(lambda: not _processes_with(MARKER), 30), "the step outlived the process that started it"
    finally:
        for pid in _processes_with(MARKER):
            os.kill(pid, signal.SIGKILL)
    run_dir = (tmp_path / "run_dir").read_text()
    results = steps_started(run_dir, [("true",), ("sleep", MARKER)], LOCAL.name)
    assert [(result.status, result.rc) for result in results] == [("ok", 0), ("interrupted", None)]
    assert steps_started(run_dir, [("true",), ("sleep", MARKER), ("false",)], LOCAL.name)[2].status == "skipped"
    assert [result.status for result in steps_started(run_dir, [("true",)], "another-host")] == ["skipped"]  # its events are not ours


def test_every_word_reaches_the_host_as_written_and_a_finished_run_leaves_no_watcher_behind(tmp_path: Path) -> None:
    words = ("{{ 7 * 6 }}", "0755", "no", "true", "1.0", "~", "~root/x", "$HOME", "${PATH}", "null", "{% raw %}")
    report = RunnerExecutor(tmp_path).run(LOCAL, [RunStep(argv=("printf", "%s|", *words), become=False)], purpose="evidence", timeout=60)
    assert [(result.status, result.stdout) for result in report.results] == [("ok", "|".join(words) + "|")]
    assert (Path(report.artifacts) / "artifacts" / "run" / "status").read_text() == "successful"
    # the run's watcher was told it finished, and went (another job's watcher on this machine is not ours)
    assert not [pid for pid in _processes_with(Leash._WATCH) if _parent(pid) == os.getpid()]


def test_a_run_told_to_stop_starts_no_step_after_it(tmp_path: Path) -> None:
    """The kill switch, thrown while a run is on: ansible-runner polls it, and no step starts once it is thrown."""
    first, last = tmp_path / "first", tmp_path / "last"
    steps = [RunStep(argv=("touch", str(first)), become=False), RunStep(argv=("sleep", "30.4321"), become=False),
             RunStep(argv=("touch", str(last)), become=False)]
    # thrown while the second step runs
    report = RunnerExecutor(tmp_path / "runs").run(LOCAL, steps, purpose="remediation", stop=lambda: bool(_processes_with("30.4321")),
                                                   timeout=60)
    # the step that ran is reported as run (its events are read to the end after the kill), the one cut off as such
    assert report.stopped and [result.status for result in report.results] == ["ok", "interrupted", "skipped"]
    assert first.exists() and not last.exists()
    # the run is stopped whole: ansible-runner alone would kill ansible-playbook and orphan its workers, which have
    # sessions of their own (they would hang on, one per host, long after the run)
    assert _wait_for(lambda: not _processes_mentioning(str(tmp_path)) and not _processes_with("30.4321"), 10), \
        _processes_mentioning(str(tmp_path))


def test_runs_over_ssh_get_keepalives_on_masters_of_their_own_when_the_play_has_none() -> None:
    play = {"ansible_connection": "ssh", "ansible_ssh_args": "-o ControlMaster=auto -o ControlPersist=60s"}
    run = _with_keepalive(play)
    assert run["ansible_ssh_extra_args"] == "-o ServerAliveInterval=5 -o ServerAliveCountMax=3"
    assert run["ansible_control_path_dir"] == "~/.ansible/cp-sentinel-heal"
    assert _with_keepalive({**play, "ansible_control_path_dir": "/run/cp"})["ansible_control_path_dir"] == "/run/cp-sentinel-heal"
    # the operator's own keepalive (in any of the three arguments) is on the play's masters: the run shares them
    for argument in ("ansible_ssh_args", "ansible_ssh_common_args", "ansible_ssh_extra_args"):
        kept = {**play, argument: f"{play.get(argument, '')} -o ServerAliveInterval=30".strip(), "ansible_control_path_dir": "/run/cp"}
        assert _with_keepalive(kept) == kept
    assert "ansible_control_path_dir" not in _with_keepalive({**play, "ansible_ssh_common_args": "-o ServerAliveInterval=30"})
    # other connections are left as they are
    assert _with_keepalive({"ansible_connection": "local"}) == {"ansible_connection": "local"}
    # where the suffix would make ssh's socket path too long (a long home), the play's own masters are used
    deep = "/srv/" + "x" * 64
    assert _with_keepalive({**play, "ansible_control_path_dir": deep})["ansible_control_path_dir"] == deep


def test_a_run_past_its_time_limit_is_killed_whole(tmp_path: Path) -> None:
    marker = "62.4321"
    try:
        with pytest.raises(ExecutorError, match="passed its time limit of 2 s and was killed"):
            RunnerExecutor(tmp_path).run(LOCAL, [RunStep(argv=("sleep", marker), become=False)], purpose="remediation", timeout=2)
        # ansible-runner alone would kill ansible-playbook and leave its worker running the step
        assert _wait_for(lambda: not _processes_with(marker), 30), "the step outlived its run's time limit"
    finally:
        for pid in _processes_with(marker):
            os.kill(pid, signal.SIGKILL)


def _job_with_a_worker(root: Path) -> None:
    """As ansible-playbook and one of its workers: the worker runs the steps; this process only waits."""

    def worker() -> None:
        try:
            _run_in_child(root)
        except JobGone as exc:
            (root / "gone").write_text(str(exc))

    multiprocessing.get_context("fork").Process(target=worker).start()
    time.sleep(3600)


def test_a_worker_whose_job_was_killed_kills_its_run_and_goes(tmp_path: Path) -> None:
    job = multiprocessing.get_context("fork").Process(target=_job_with_a_worker, args=(tmp_path,))
    job.start()
    try:
        assert _wait_for(lambda: _processes_with(MARKER), 60), "the step never started"
        os.kill(job.pid or 0, signal.SIGKILL)  # ansible-playbook killed; its worker (a session of its own) lives on
        job.join()
        assert _wait_for((tmp_path / "gone").exists, 60), "the worker did not notice its job was gone"
        assert "the job that started this remediation was killed" in (tmp_path / "gone").read_text()
        assert _wait_for(lambda: not _processes_with(MARKER), 30), "the step outlived its job"
    finally:
        for pid in _processes_with(MARKER):
            os.kill(pid, signal.SIGKILL)


def test_one_run_carries_several_hosts_each_with_its_own_steps_and_results(tmp_path: Path) -> None:
    first = Target(name="first", host_vars=LOCAL.host_vars)
    second = Target(name="second", host_vars=LOCAL.host_vars)
    outcomes = RunnerExecutor(tmp_path).run_together(
        [(first, [RunStep(argv=("printf", "%s", "{{ 1 + 1 }}"), become=False), RunStep(argv=("false",), become=False)]),
         (second, [RunStep(argv=("printf", "%s", "second"), become=False)])],
        purpose="remediation",
    )
    one, two = outcomes["first"], outcomes["second"]
    assert isinstance(one, RunReport) and isinstance(two, RunReport)
    assert [(r.status, r.stdout) for r in one.results] == [("ok", "{{ 1 + 1 }}"), ("failed", "")]
    assert [(r.status, r.stdout) for r in two.results] == [("ok", "second")]
    assert one.artifacts == two.artifacts and Path(one.artifacts).parent.name == "first"  # one run, kept under the first host


def test_a_shared_runs_hosts_all_run_at_once_whatever_ansibles_forks(tmp_path: Path) -> None:
    """Twelve hosts, more than the forks Ansible is configured with: each step waits until every host's has started,
    which only happens when they all run at once."""
    arrived = tmp_path / "arrived"
    arrived.mkdir()
    barrier = 'touch "$1/$2"; i=0; while [ "$(ls "$1" | wc -l)" -lt 12 ]; do i=$((i + 1)); [ $i -gt 300 ] && exit 1; sleep 0.1; done'
    members = [(Target(name=f"h{number}", host_vars=LOCAL.host_vars), [RunStep(argv=("sh", "-c", barrier, "sh", str(arrived), f"h{number}"),
                                                                               become=False)]) for number in range(12)]
    outcomes = RunnerExecutor(tmp_path / "runs").run_together(members, purpose="remediation", timeout=120)
    assert {name: [result.status for result in report.results] for name, report in outcomes.items()  # type: ignore[union-attr]
            } == {f"h{number}": ["ok"] for number in range(12)}


def test_a_watcher_that_cannot_start_stops_the_run_before_it_starts_with_a_clear_error(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(sys, "executable", str(tmp_path / "no-python-here"))  # as when no process can be started
    with pytest.raises(ExecutorError, match="the run's watcher could not start, so the run did not"):
        RunnerExecutor(tmp_path).run(LOCAL, [RunStep(argv=("touch", str(tmp_path / "ran")), become=False)], purpose="remediation")
    assert not (tmp_path / "ran").exists()


def test_a_run_inside_a_job_that_ansible_runner_runs_reports_its_steps(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    # what ansible-runner sets for the job it runs (an AWX job, an ansible-rulebook run_playbook) when the job's own
    # callback was the default one: the heal's run starts inside that environment
    monkeypatch.setenv("ANSIBLE_STDOUT_CALLBACK", "awx_display")
    monkeypatch.setenv("ORIGINAL_STDOUT_CALLBACK", "ansible.builtin.default")
    report = RunnerExecutor(tmp_path).run(LOCAL, [RunStep(argv=("echo", "inside"), become=False)], purpose="remediation", timeout=60)
    assert [(result.status, result.stdout) for result in report.results] == [("ok", "inside")]


def test_with_the_executor_on_the_host_a_step_without_its_request_does_not_run(tmp_path: Path) -> None:
    with pytest.raises(ExecutorError) as raised:
        RunnerExecutor(tmp_path, privilege="executor").run(LOCAL, [RunStep(argv=("true",), become=False)], purpose="remediation")
    assert raised.value.field == "steps" and "carries no request" in str(raised.value)


@pytest.mark.parametrize(("stdout", "status", "rc", "said"), [
    ('{"refused": true, "rule": "policy-version", "reason": "apply the role again"}', "refused", 77,
     "refused by the host's executor (policy-version): apply the role again"),
    ('{"refused": false, "rc": 3, "stdout": "inactive", "stderr": ""}', "failed", 3, "inactive"),
    ('{"refused": false, "rc": 0, "stdout": "active", "stderr": ""}', "ok", 0, "active"),
    ("sudo: a password is required", "refused", 77, "the executor on the host did not answer"),
])
def test_the_executors_answer_is_the_steps_result(tmp_path: Path, stdout: str, status: str, rc: int, said: str) -> None:
    """A step runs as `sudo -n EXEC` with its request on stdin; what the executor prints is the step's own result."""
    step = RunStep(argv=("systemctl", "is-active", "nginx"), become=False)
    event = {"failed": rc != 0, "res": {"rc": 0 if stdout.startswith("{") else 1, "stdout": stdout, "stderr": ""}}
    result = RunnerExecutor(tmp_path, privilege="executor")._result(0, step, event, stopped=False)
    assert (result.status, result.rc) == (status, rc)
    assert said in result.output
