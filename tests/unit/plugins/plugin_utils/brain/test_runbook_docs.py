"""The guide runbooks.rst (docs/docsite/rst/): every example loads, and matches and plans as the guide says."""

from __future__ import annotations

import pytest
from guides import code_blocks, guide_path

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.reading import Finding, Reading
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import Runbook, parse_runbook
from helpers import nginx_failure

SQUATTER = {"pid": 4242, "process": "python3", "cmdline": "python3 -m http.server 80"}


@pytest.fixture(scope="module")
def examples() -> dict[str, Runbook]:
    loaded = [parse_runbook(block.body, f"{guide_path('runbooks')}:{block.line}") for block in code_blocks("runbooks", "markdown")]
    return {runbook.id: runbook for runbook in loaded}


def test_every_kind_of_condition_has_an_example(examples: dict[str, Runbook]) -> None:
    assert set(examples) == {"example-stale-pid", "example-missing-path", "example-port-squatter", "example-config-fine"}
    assert any(rb.evidence_patterns for rb in examples.values()) and any(rb.readings for rb in examples.values())
    assert any(rb.queries for rb in examples.values()) and any(rb.variables for rb in examples.values())


def test_the_examples_match_and_plan_as_the_page_says(examples: dict[str, Runbook]) -> None:
    stale = nginx_failure("stale_pidfile")
    assert examples["example-stale-pid"].matches(stale, {})
    assert [s.argv for s in examples["example-stale-pid"].render_steps(stale)] == [("rm", "-f", "/run/nginx.pid"), ("service", "nginx", "start")]

    missing = Reading((Finding(kind="missing_path", lines=('open() "/srv/www" failed (2: No such file or directory)',), source="log"),))
    assert examples["example-missing-path"].matches(nginx_failure("not_running"), {}, missing)
    assert not examples["example-missing-path"].matches(nginx_failure("not_running"), {})

    squatted = nginx_failure("port_conflict", owner=SQUATTER)
    assert examples["example-port-squatter"].matches(squatted, {})
    assert [s.argv for s in examples["example-port-squatter"].render_steps(squatted)] == [("kill", "-TERM", "4242"), ("service", "nginx", "start")]
    assert not examples["example-port-squatter"].matches(nginx_failure("port_conflict", owner={**SQUATTER, "process": "nginx"}), {})

    down = nginx_failure("not_running")
    assert examples["example-config-fine"].evidence_commands == ("nginx -t",)
    assert examples["example-config-fine"].matches(down, {"nginx -t": "nginx: the configuration file /etc/nginx/nginx.conf syntax is ok"})
    assert not examples["example-config-fine"].matches(down, {"nginx -t": "nginx: [emerg] unknown directive"})
