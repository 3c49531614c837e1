"""Forks of one run that remediate at about the same time meet and share one ansible-runner run (local connection)."""

from __future__ import annotations

import sys
import threading
from pathlib import Path
from typing import Callable

from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.rendezvous import Rendezvous
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.runner import RunnerExecutor
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.steps import HostRequest, RunReport, RunStep, Target

LOCAL = {"ansible_connection": "local", "ansible_python_interpreter": sys.executable}


def _meet(tmp_path: Path, hosts: dict[str, Target], run_hosts: int, privileges: dict[str, str] | None = None, alone: frozenset[str] = frozenset(),
          polls: dict[str, int] | None = None, seconds: int = 0) -> tuple[dict[str, RunReport | Exception], dict[str, str]]:
    """Each fork's report and the run its lease learnt; with ``polls``, how often each fork's stop was asked while its
    run (of ``seconds`` more) went on."""
    reports: dict[str, RunReport | Exception] = {}
    told: dict[str, str] = {}

    def stop_of(name: str) -> Callable[[], bool] | None:
        if polls is None:
            return None

        def stop() -> bool:
            polls[name] = polls.get(name, 0) + 1
            return False
        return stop

    def fork(name: str) -> None:
        privilege = (privileges or {}).get(name, "become")
        # a wide gap and window: on a busy machine the threads reach the meeting seconds apart (the gatherer still closes as
        # soon as the whole run joined)
        executor = Rendezvous(RunnerExecutor(tmp_path, privilege=privilege), key="run-1", hosts=run_hosts, gap=5.0, window=30.0)
        argv = ("sh", "-c", f"sleep {seconds}; printf %s {name}") if seconds else ("printf", "%s", name)
        step = RunStep(argv=argv, become=False, on_host=HostRequest(name, "0123456789abcdef", (argv,), 0) if privilege == "executor" else None)
        try:
            reports[name] = executor.run(hosts[name], [step], purpose="remediation", stop=stop_of(name),
                                         started=lambda run_dir: told.__setitem__(name, run_dir), timeout=60, alone=name in alone)
        except Exception as exc:  # noqa: BLE001 - the test reports what each fork got
            reports[name] = exc

    threads = [threading.Thread(target=fork, args=(name,)) for name in hosts]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(120)
    return reports, told


def test_forks_that_remediate_together_share_one_run_and_each_gets_its_own_results(tmp_path: Path) -> None:
    hosts = {name: Target(name=name, host_vars=LOCAL) for name in ("web1", "web2", "web3")}
    reports, told = _meet(tmp_path, hosts, run_hosts=3)
    assert all(isinstance(report, RunReport) for report in reports.values()), reports
    assert {name: [(r.status, r.stdout) for r in report.results] for name, report in reports.items()  # type: ignore[union-attr]
            } == {name: [("ok", name)] for name in hosts}
    assert len({report.artifacts for report in reports.values()}) == 1  # type: ignore[union-attr]
    assert len(set(told.values())) == 1 and set(told) == set(hosts)  # each fork's lease learnt the shared run before it started
    assert len(list(tmp_path.glob("*/*-remediation-*"))) == 1


def test_every_fork_of_a_shared_run_is_polled_while_it_goes_on_so_each_lease_keeps_beating(tmp_path: Path) -> None:
    hosts = {name: Target(name=name, host_vars=LOCAL) for name in ("web1", "web2")}
    polls: dict[str, int] = {}
    reports, told = _meet(tmp_path, hosts, run_hosts=2, polls=polls, seconds=4)
    assert all(isinstance(report, RunReport) for report in reports.values()), reports
    assert len(set(told.values())) == 1  # one run, gathered by one fork, joined by the other
    assert sorted(polls) == ["web1", "web2"] and min(polls.values()) >= 2, polls


def test_a_fork_with_other_connection_secrets_or_alone_in_its_run_runs_by_itself(tmp_path: Path) -> None:
    hosts = {"web1": Target(name="web1", host_vars=LOCAL, secret_vars={"ansible_become_password": "one"}),
             "web2": Target(name="web2", host_vars=LOCAL, secret_vars={"ansible_become_password": "two"})}
    reports, _told = _meet(tmp_path / "secrets", hosts, run_hosts=2)
    assert all(isinstance(report, RunReport) for report in reports.values()), reports
    assert len({report.artifacts for report in reports.values()}) == 2  # type: ignore[union-attr]
    alone, _told = _meet(tmp_path / "alone", {"web1": Target(name="web1", host_vars=LOCAL)}, run_hosts=1)
    assert isinstance(alone["web1"], RunReport) and alone["web1"].results[0].stdout == "web1"


def test_a_fork_told_to_run_alone_neither_gathers_nor_joins_the_others(tmp_path: Path) -> None:
    hosts = {name: Target(name=name, host_vars=LOCAL) for name in ("web1", "web2", "web3")}
    reports, told = _meet(tmp_path, hosts, run_hosts=3, alone=frozenset({"web1"}))  # web1 is its plan's canary
    assert all(isinstance(report, RunReport) for report in reports.values()), reports
    assert told["web1"] not in (told["web2"], told["web3"]) and told["web2"] == told["web3"]
    assert len(list(tmp_path.glob("*/*-remediation-*"))) == 2


def test_forks_that_get_root_another_way_run_apart_and_a_joined_forks_steps_keep_what_the_executor_is_told(tmp_path: Path) -> None:
    """web1 and web2 go through the executor on their hosts (none is installed here, so each step is refused as the host's
    answer, never for a request lost on the way to the run), web3 becomes root itself: two runs."""
    hosts = {name: Target(name=name, host_vars=LOCAL) for name in ("web1", "web2", "web3")}
    reports, _told = _meet(tmp_path, hosts, run_hosts=3, privileges={"web1": "executor", "web2": "executor"})
    assert all(isinstance(report, RunReport) for report in reports.values()), reports
    runs = {name: report.artifacts for name, report in reports.items()}  # type: ignore[union-attr]
    assert runs["web1"] == runs["web2"] != runs["web3"]
    assert [(r.status, r.stdout) for r in reports["web3"].results] == [("ok", "web3")]  # type: ignore[union-attr]
    for name in ("web1", "web2"):
        [result] = reports[name].results  # type: ignore[union-attr]
        assert result.status == "refused" and "the executor on the host did not answer" in result.stderr, result
