"""A read-only command piped into a filter: the command runs alone, the filter is applied to its output here."""

from __future__ import annotations

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.answer_parsing import parse_plan
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.filters import filtered, parse_filter, split_pipeline
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import PolicyContext, evaluate_argv, load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision, StepResult
from helpers import nginx_failure

LOG = "\n".join(f"line {n} {'error' if n % 3 == 0 else 'ok'}" for n in range(1, 21))


@pytest.mark.parametrize(("stage", "kept"), [
    (["tail", "-n", "2"], ["line 19 ok", "line 20 ok"]),
    (["tail", "-2"], ["line 19 ok", "line 20 ok"]),
    (["tail", "--lines=1"], ["line 20 ok"]),
    (["head", "-n1"], ["line 1 ok"]),
    (["grep", "-i", "ERROR"], [f"line {n} error" for n in (3, 6, 9, 12, 15, 18)]),
    (["grep", "-v", "ok"], [f"line {n} error" for n in (3, 6, 9, 12, 15, 18)]),
    (["grep", r"line 1\(2\|5\)"], ["line 12 error", "line 15 error"]),
    (["grep", "-E", "line 1(2|5)"], ["line 12 error", "line 15 error"]),
    (["grep", "-F", "line 1("], []),
    (["grep", "-w", "line 2"], ["line 2 ok"]),  # not line 20
])
def test_a_filter_keeps_what_the_command_line_would(stage: list[str], kept: list[str]) -> None:
    found = parse_filter(stage)
    assert found is not None and found.apply(LOG).splitlines() == kept


@pytest.mark.parametrize("stage", [
    ["tee", "/etc/passwd"], ["sh"], ["xargs", "rm"], ["grep", "x", "/etc/shadow"], ["grep", "-r", "x"], ["grep", "-f", "/etc/shadow"],
    ["tail", "-f"], ["tail", "-n", "5", "/etc/shadow"], ["head", "-c", "10"], ["grep"], ["sort", "-o", "/etc/passwd"], [],
])
def test_anything_but_a_pure_filter_is_left_in_the_command_for_the_guard(stage: list[str]) -> None:
    assert parse_filter(stage) is None
    assert split_pipeline(["journalctl", "-u", "nginx", "|", *stage]) is None


def test_a_model_piping_a_read_into_a_filter_gets_the_read_judged_alone_and_the_filter_applied() -> None:
    plan = parse_plan('{"steps": [["sudo", "journalctl", "-u", "nginx", "-n", "200", "--no-pager", "|", "grep", "-i", "emerg", "|", '
                      '"tail", "-n", "5"], ["systemctl", "start", "nginx"]]}', init_service="nginx")
    assert plan.steps == (("journalctl", "-u", "nginx", "-n", "200", "--no-pager"), ("systemctl", "start", "nginx"))
    assert plan.filters == (("grep -i emerg", "tail -n 5"), ())
    failure = nginx_failure()
    verdict = evaluate_argv(plan.steps[0], PolicyContext.from_failure(failure), load_policy())
    assert verdict.decision is Decision.ALLOW, verdict.reason
    result = StepResult(argv=plan.steps[0], status="ok", rc=0, stdout="a\n[emerg] one\nb\n[EMERG] two")
    assert filtered(result, plan.filters[0]).stdout == "[emerg] one\n[EMERG] two"


def test_a_pipe_into_anything_else_stays_and_the_guard_refuses_it() -> None:
    plan = parse_plan('{"steps": [["cat", "/var/log/nginx/error.log", "|", "tee", "/etc/cron.d/x"]]}', init_service="nginx")
    assert plan.steps == (("cat", "/var/log/nginx/error.log", "|", "tee", "/etc/cron.d/x"),) and plan.filters == ((),)
    verdict = evaluate_argv(plan.steps[0], PolicyContext.from_failure(nginx_failure()), load_policy())
    assert verdict.decision is not Decision.ALLOW
