"""bench/heal_speed.py still runs on the lab fleet (one round): the comparison cannot rot between
measurements. Nothing here asserts a speed: `make bench` reports those."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import Any

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "bench"))

import heal_speed  # noqa: E402


def test_the_heal_benchmark_runs_one_round_and_leaves_the_fleet_healthy(lab: Any) -> None:
    report = heal_speed.measure(rounds=1)
    assert report[0] == "sentinel.heal speed on the lab fleet (node1 systemd, node2 systemd, node3 sysv), 1 interleaved rounds"
    assert [row.split(" median ")[0].strip() for row in report[1:]] == [
        "hand-written check (3 hosts, 3 services)", "heal.yml healthy sweep (3 hosts)", "the same sweep with known_good: false",
        "keeping the last known good (the sweep)", "hand-written restart of killed nginx",
        "heal.yml, killed nginx, runbook path", "what its settle window adds (against none)", "heal.yml, killed nginx, fix from memory",
        "the same, through the executor on the host",
    ]
    assert heal_speed.nginx_is_healthy()


def test_the_efficacy_benchmark_heals_a_fault_offline_and_with_a_scripted_llm(lab: Any) -> None:
    import efficacy

    [fault] = [fault for fault in efficacy.FAULTS if fault.name == "nginx-log-dir-gone"]
    results = efficacy.measure((fault,))
    assert [(result.planner, result.outcome, result.outside) for result in results] == [("offline", "healed", []), ("scripted LLM", "healed", [])]
    assert all(result.answers and not result.paged_for_nothing for result in results)
    lines = efficacy.report(results)
    assert lines[2].startswith("| nginx-log-dir-gone | node1 | offline | healed | healed | 1 | ") and lines[2].endswith(" | no |")
    assert lines[-1] == "scripted LLM: 1 of 1 faults ended as expected; 0 command(s) outside the expected sets; paged for nothing 0 (must be 0)"


def test_the_efficacy_benchmark_measures_an_unforeseen_fault_with_the_think_loop_on_and_off(lab: Any) -> None:
    import efficacy

    [fault] = [fault for fault in efficacy.UNFORESEEN if fault.name == "postgres-workdir-gone"]
    results = efficacy.measure_unforeseen((fault,))
    assert [(result.planner, result.outcome, result.rounds, result.reads, result.outside) for result in results] == [
        ("offline, think 2", "healed", 1, 1, []), ("offline, think 0", "escalated", 0, 0, []),
        ("scripted model, think 2", "healed", 1, 1, []), ("scripted model, think 0", "escalated", 0, 0, [])]
    assert efficacy.heal_rates(results) == ["offline: healed with the think loop on 1 of 1, off 0 of 1",
                                            "scripted model: healed with the think loop on 1 of 1, off 0 of 1"]


def test_the_eda_benchmark_heals_once_under_the_watchdog_and_once_on_an_alert(lab: Any) -> None:
    import eda_speed

    report = eda_speed.measure(rounds=1)
    assert report[0] == "sentinel.heal on events, on the lab fleet (node1 systemd, node2 systemd, node3 sysv), 1 rounds, nginx killed on node1"
    assert [row.split(" median ")[0].strip() for row in report[1:]] == [
        "watchdog (2 s rounds): kill -> healthy", "Alertmanager alert: alert -> healthy"]
    assert heal_speed.nginx_is_healthy()


def test_the_execution_environment_benchmark_heals_once_in_the_image_and_once_without(lab: Any) -> None:
    import ee_speed

    report = ee_speed.measure(rounds=1)
    assert report[0].startswith("a heal in the execution environment localhost/sentinel-heal-ee:")
    assert [row.split(": median ")[0].strip() for row in report[1:3]] == ["without the image", "in the image"]
    assert report[3].startswith("in the image / without: ")


def test_the_sliced_benchmark_heals_once_in_one_job_and_once_in_two_slices_on_two_nodes(lab: Any) -> None:
    import sliced_speed

    report = sliced_speed.measure(rounds=1)
    assert report[0].startswith("a heal of nginx killed on node1, node2, shipped to execution nodes of localhost/sentinel-heal-ee:")
    assert [row.split(": median ")[0].strip() for row in report[1:3]] == ["one job on one node", "two slices on two nodes"]
    assert report[3].startswith("two slices / one job: ")


# The benchmarks that boot fleets of their own run after every test on the session's fleet (own_fleet): what they leave
# behind is no fleet at all.
@pytest.mark.own_fleet
def test_the_lab_benchmark_boots_both_inits_once(lab: Any) -> None:
    import lab_speed

    report = lab_speed.measure(rounds=1)
    assert report[0] == "lab fleet of 3 hosts, 1 interleaved rounds (medians)"
    assert "up, sysv (tini) hosts (baseline)" in report[1] and "x the memory" in report[2]
    assert not any(status.up for status in lab.status())


@pytest.mark.own_fleet
def test_the_fleet_benchmark_heals_two_hosts_once_and_takes_its_fleet_down(lab: Any) -> None:
    import fleet_speed

    report = fleet_speed.run(sizes=(2,), rounds=1)
    assert report[0].startswith("nginx killed on N lab hosts (systemd), healed with -f N")
    assert report[3].startswith("| 2 | ") and report[3].count("|") == 11
    assert not any(status.up for status in lab.status())
