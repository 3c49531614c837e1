"""Dependencies first: a failing service that needs another failing one (its ``depends_on``, or its unit's Requires=,
BindsTo= or After=) is healed after it, checked again before anything is planned for it, and never healed blindly
while what it needs stays down."""

from __future__ import annotations

import dataclasses
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure, Hold
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.dependencies import check_depends_on, dependencies_first, with_what_they_need
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.results import host_result
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import DependencyOutcome
from helpers import CONFIG_OK, HEALTHY, ScriptedExecutor, _tools, nginx_failure


def failing(service: str, *, depends_on: tuple[str, ...] = (), unit: dict[str, Any] | None = None, init_service: str = "",
            ports: tuple[int, ...] = (80,), backends: tuple[int, ...] = ()) -> Failure:
    base = nginx_failure()
    spec = dict(base.spec, name=service, depends_on=list(depends_on), ports=list(ports), **({"service": init_service} if init_service else {}))
    evidence = dict(base.evidence, unit=unit, backends=list(backends)) if unit is not None else dict(base.evidence, backends=list(backends))
    return dataclasses.replace(base, service=service, spec=spec, evidence=evidence)


def order(failures: list[Failure]) -> list[tuple[str, tuple[str, ...]]]:
    return [(failure.service, needs) for failure, needs in dependencies_first(failures)]


def test_a_service_is_healed_after_the_failing_services_it_declares_it_needs() -> None:
    assert order([failing("web", depends_on=("api",)), failing("api", depends_on=("db",)), failing("db"), failing("cache")]) == [
        ("db", ()), ("api", ("db",)), ("web", ("api",)), ("cache", ())]


def test_systemd_says_what_a_unit_needs_by_requires_binds_to_and_after_between_declared_units() -> None:
    worker = failing("worker", unit={"Id": "worker.service", "Requires": "sysinit.target redis-server.service", "After": "network.target"})
    redis = failing("redis", init_service="redis-server", unit={"Id": "redis-server.service"})
    api = failing("api", unit={"Id": "api.service", "After": "postgresql@15-main.service basic.target"})
    postgres = failing("postgresql", unit={"Id": "postgresql@15-main.service", "wrapper": {"Id": "postgresql.service"}})
    assert order([worker, redis, api, postgres]) == [("redis", ()), ("worker", ("redis",)), ("postgresql", ()), ("api", ("postgresql",))]


def test_a_proxy_needs_the_declared_service_listening_on_a_backend_port_its_configuration_names() -> None:
    haproxy = failing("haproxy", ports=(8080,), backends=(8081, 9000))
    apache2 = failing("apache2", ports=(8081,))
    memcached = failing("memcached", ports=(11211,))
    assert order([haproxy, memcached, apache2]) == [("apache2", ()), ("haproxy", ("apache2",)), ("memcached", ())]


def test_a_cycle_is_cut_where_it_closes_and_a_healthy_dependency_is_no_dependency() -> None:
    assert order([failing("a", depends_on=("b",)), failing("b", depends_on=("a",))]) == [("b", ()), ("a", ("b",))]
    # "db" is declared and needed, but did not fail: web is healed as any service
    assert order([failing("web", depends_on=("db",))]) == [("web", ())]


def test_depends_on_must_name_another_declared_service() -> None:
    check_depends_on([{"name": "web", "depends_on": ["api"]}, {"name": "api"}])
    with pytest.raises(ConfigError) as raised:
        check_depends_on([{"name": "web", "depends_on": ["apu"]}, {"name": "api"}])
    assert (raised.value.field, raised.value.value) == ("services[0].depends_on", "apu") and "api" in str(raised.value.hint)


def test_a_service_that_answers_once_what_it_needs_was_healed_ends_recovered_with_nothing_run_for_it(tmp_path: Path) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    outcome = heal_incident(failing("web", depends_on=("api",)), _tools(tmp_path, executor, [HEALTHY]),
                            [DependencyOutcome("api", "healed", "")])
    assert outcome.trace.path == ["diagnose", "dependencies", "recovered"]
    assert executor.runs == [] and outcome.state.attempts == [] and outcome.state.episodes == []
    incident = outcome.to_dict()
    assert incident["depends_on"] == [{"service": "api", "status": "healed", "reason": ""}]
    result = host_result("web1", [outcome], check_mode=False)
    assert result["status"] == "recovered"
    assert result["summary"] == ["web1: web recovered: web answers again since what it needs was healed first: api (healed); nothing ran for web"]


def test_a_service_still_failing_once_what_it_needs_is_back_is_healed_from_what_it_says_now(tmp_path: Path) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    still = dict(failing("web", depends_on=("api",)).to_dict(), healthy=False)
    outcome = heal_incident(failing("web", depends_on=("api",)), _tools(tmp_path, executor, [still, HEALTHY]),
                            [DependencyOutcome("api", "recovered", "")])
    assert outcome.trace.path == ["diagnose", "dependencies", "diagnose", "plan", "guard", "rollout", "execute", "verify", "record", "healed"]
    assert outcome.state.status == "healed" and executor.remediations


@pytest.mark.parametrize(("status", "path", "ends"), [
    ("escalated", ["diagnose", "dependencies", "escalate"], "escalated"),
    ("unreachable", ["diagnose", "dependencies", "escalate"], "escalated"),
    ("awaiting_approval", ["diagnose", "dependencies", "deferred"], "deferred"),
    ("deferred", ["diagnose", "dependencies", "deferred"], "deferred"),
])
def test_a_service_whose_dependency_is_not_back_is_never_healed_blindly(tmp_path: Path, status: str, path: list[str], ends: str) -> None:
    executor = ScriptedExecutor(CONFIG_OK)
    outcome = heal_incident(failing("web", depends_on=("api",)), _tools(tmp_path, executor, []),
                            [DependencyOutcome("api", status, "api: upstream refused the password")])
    assert outcome.trace.path == path and outcome.state.status == ends
    assert executor.runs == []
    assert outcome.state.reason == f"web needs api, which is {status.replace('_', ' ')}: api: upstream refused the password"


def test_a_job_about_one_service_checks_it_and_what_it_needs_all_the_way_down() -> None:
    services = [{"name": "web", "depends_on": ["api"]}, {"name": "api", "depends_on": ["db"]}, {"name": "db"}, {"name": "cache"}]
    assert [spec["name"] for spec in with_what_they_need(services, ["web"])] == ["web", "api", "db"]
    assert [spec["name"] for spec in with_what_they_need(services, ["cache"])] == ["cache"]
    assert with_what_they_need(services, []) == services
    with pytest.raises(ConfigError) as raised:
        with_what_they_need(services, ["wbe"])
    assert (raised.value.field, raised.value.value) == ("target_services", "wbe")


def test_a_persons_silence_of_the_service_is_heard_before_its_dependencies(tmp_path: Path) -> None:
    """A silenced service whose dependency escalated is not paged for: the silence comes first."""
    held = Hold("silence", "silenced by alice", "sentinel.heal.silence state=absent silence_id=1 decided_by=YOU", until=2e9)
    tools = _tools(tmp_path, ScriptedExecutor(CONFIG_OK), [], silence=lambda failure: held)
    outcome = heal_incident(failing("web", depends_on=("api",)), tools, [DependencyOutcome("api", "escalated", "api is broken")])
    assert outcome.trace.path == ["diagnose", "record", "silenced"] and outcome.state.status == "silenced"
