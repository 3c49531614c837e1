"""The run's rollout rules on their own: which plans need a canary, and when a run halts."""

from __future__ import annotations

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.rollout import CanaryKey, halted_because
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Plan, PlanSource, Step
from helpers import nginx_failure


def _plan(source: PlanSource, *templates: str) -> Plan:
    return Plan(source=source, reference="r", rationale="", steps=tuple(Step(template=t, argv=tuple(t.split())) for t in templates))


def test_only_plans_never_verified_need_a_canary_and_the_same_steps_share_one() -> None:
    failure = nginx_failure("not_running")
    assert CanaryKey.of("run", failure, _plan(PlanSource.RUNBOOK, "service nginx start")) is None
    assert CanaryKey.of("run", failure, _plan(PlanSource.MEMORY, "service nginx start")) is None
    llm = CanaryKey.of("run", failure, _plan(PlanSource.LLM, "service nginx start"))
    assert llm is not None and llm == CanaryKey.of("run", nginx_failure("not_running", host="web2"), _plan(PlanSource.LLM, "service nginx start"))
    assert llm != CanaryKey.of("run", failure, _plan(PlanSource.LLM, "service nginx restart"))
    assert llm != CanaryKey.of("another run", failure, _plan(PlanSource.LLM, "service nginx start"))
    assert llm != CanaryKey.of("run", nginx_failure("stale_pidfile"), _plan(PlanSource.LLM, "service nginx start"))
    assert CanaryKey.of("run", failure, _plan(PlanSource.GENERIC, "service nginx restart")) is not None


@pytest.mark.parametrize(("failed", "hosts", "threshold", "halts"), [
    (0, 10, 0, False), (1, 10, 0, True), (1, 4, 25, False), (2, 4, 25, True), (5, 10, 50, False), (6, 10, 50, True),
    (9, 10, 100, False), (10, 10, 100, False), (3, 3, None, False), (1, 0, 10, False),
])
def test_a_run_halts_once_more_than_the_threshold_of_its_hosts_failed(failed: int, hosts: int, threshold: int | None, halts: bool) -> None:
    why = halted_because([f"web{n}" for n in range(failed)], run_hosts=hosts, max_fail_percentage=threshold)
    assert (why is not None) == halts
    if why is not None:
        assert f"on {failed} of the {hosts} hosts of this run" in why and f"more than max_fail_percentage {threshold}%" in why
