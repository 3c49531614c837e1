"""The terminal: long work shows, per host, the attempt and the node an incident is in; quick work shows nothing."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import IncidentState
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.heal import LONG_WORK_S, progress_line
from helpers import CONFIG_OK, HEALTHY, STILL_DOWN, ScriptedExecutor, _tools, nginx_failure


def test_every_node_an_incident_enters_is_told_in_order(tmp_path: Path) -> None:
    entered: list[tuple[int, str]] = []
    tools = _tools(tmp_path, ScriptedExecutor(CONFIG_OK), [STILL_DOWN, HEALTHY], max_attempts=2,
                   progress=lambda state, node: entered.append((len(state.attempts), node)))
    outcome = heal_incident(nginx_failure(), tools)
    assert [node for _attempts, node in entered] == outcome.trace.path
    assert entered[:2] == [(0, "diagnose"), (1, "plan")] and (1, "diagnose") in entered  # the second attempt opens there


def test_a_line_once_the_work_is_long_naming_host_service_attempt_and_node() -> None:
    state = IncidentState(failure=nginx_failure(host="web7"), started_at=1000.0)
    assert progress_line(state, "diagnose", max_attempts=3, now=1000.0 + LONG_WORK_S - 0.1) is None
    assert progress_line(state, "diagnose", max_attempts=3, now=1012.0) == "web7 nginx: attempt 1 of 3: diagnose (12 s)"
