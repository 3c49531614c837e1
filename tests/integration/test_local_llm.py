"""Planning with a real model: SmolLM2-135M-Instruct behind llama.cpp's OpenAI-compatible server (tests/local_llm.py).

Real requests go through the real LLMClient and Planner, with each form of the plan's schema that llama.cpp's server
takes. Whatever a model this small says, the call ends within ``llm.timeout``, within the token budget, and ends in
either a plan read from the model - every step judged by the default policy in the incident's context, never run - or
the offline planner's plan with the reason. No lab fleet: the incidents are built as service_check reports them.
"""

from __future__ import annotations

import dataclasses
import re
import time
from typing import Callable

import pytest
from local_llm import LocalLLM

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.llm import LLMClient, LLMSettings, TokenBudget
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import Diagnosis, LLMUse, Planner
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import PolicyContext, evaluate, evaluate_plan
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision, Failure, Plan, PlanSource
from helpers import nginx_failure

TIMEOUT = 30.0  # the default llm.timeout
BUDGET = 6000
# what the client may add to llm.timeout: the worker thread's join and the planner's own work
TIMEOUT_SLACK = 2.0
# the forms llama.cpp's server takes: json_object with the plan's schema (a grammar), and json_object alone
SCHEMAS = ("llamacpp", "none")
SYSTEMD_DEBIAN = {"service_manager": "systemd", "os": {"id": "debian", "version_id": "12"}}
SYSV_DEBIAN = {"service_manager": "sysv", "os": {"id": "debian", "version_id": "12"}}
# uvicorn's access log line for each chat completion the server answered, with its status
_CHAT_REQUEST = re.compile(r'"POST /v1/chat/completions HTTP/[0-9.]+" (?P<status>[0-9]{3})')


def nginx_stale_pidfile() -> Failure:
    return dataclasses.replace(nginx_failure(), facts=SYSV_DEBIAN)


def postgres_invalid_parameter() -> Failure:
    """postgresql.conf sets shared_buffers to a value postgres refuses, so the cluster does not start: no runbook knows
    this fault, and the fix (correct the configuration) is nothing a restart can do."""
    log = ('2026-11-25 08:00:01.112 UTC [4242] LOG:  invalid value for parameter "shared_buffers": "128XB"\n'
           '2026-11-25 08:00:01.112 UTC [4242] HINT:  Valid units for this parameter are "B", "kB", "MB", "GB", and "TB".\n'
           '2026-11-25 08:00:01.113 UTC [4242] FATAL:  configuration file "/etc/postgresql/15/main/postgresql.conf" contains errors')
    cause = 'FATAL:  configuration file "/etc/postgresql/15/main/postgresql.conf" contains errors'
    journal = ("Starting postgresql@15-main.service - PostgreSQL Cluster 15-main...\n"
               "postgresql@15-main.service: Can't open PID file /run/postgresql/15-main.pid (yet?) after start: No such file or directory\n"
               "Error: /usr/lib/postgresql/15/bin/pg_ctl /usr/lib/postgresql/15/bin/pg_ctl start -D /var/lib/postgresql/15/main -l "
               "/var/log/postgresql/postgresql-15-main.log -s -o  -c config_file=\"/etc/postgresql/15/main/postgresql.conf\"  "
               "exited with status 1: \n"
               "postgresql@15-main.service: Control process exited, code=exited, status=1/FAILURE\n"
               "postgresql@15-main.service: Failed with result 'exit-code'.\n"
               "Failed to start postgresql@15-main.service - PostgreSQL Cluster 15-main.")
    return Failure(
        host="db1",
        service="postgresql",
        failure_class="not_running",
        summary=("unit postgresql@15-main.service is failed (failed), result exit-code, control process exited with status 1; "
                 f"its journal says: {cause}; tcp 127.0.0.1:5432: Connection refused"),
        evidence={
            "status": {"command": "systemctl status postgresql@15-main.service", "rc": 3,
                       "output": "x postgresql@15-main.service - PostgreSQL Cluster 15-main\n     Active: failed (Result: exit-code)"},
            "unit": {"Id": "postgresql@15-main.service", "ActiveState": "failed", "SubState": "failed", "Result": "exit-code",
                     "journal": journal, "cause": cause},
            "logs": {"/var/log/postgresql/postgresql-15-main.log": log},
            "port_owners": [],
            "pidfile": {"path": "/var/lib/postgresql/15/main/postmaster.pid", "exists": False, "pid": None, "alive": False, "process": None},
            "processes": [],
        },
        spec={"name": "postgresql", "service": None, "ports": [5432], "process": "postgres", "user": "postgres",
              "check_command": "pg_isready -h 127.0.0.1 -U postgres -d postgres", "running_indicator": "accepting connections",
              "pidfile": "/var/lib/postgresql/15/main/postmaster.pid", "logs": ["/var/log/postgresql/postgresql-15-main.log"],
              "paths": ["/var/lib/postgresql/15/main", "/run/postgresql"]},
        facts=SYSTEMD_DEBIAN,
    )


INCIDENTS: dict[str, Callable[[], Failure]] = {
    "nginx-stale-pidfile": nginx_stale_pidfile,
    "postgres-invalid-parameter": postgres_invalid_parameter,
}


def chat_statuses(local_llm: LocalLLM, since: int) -> list[int]:
    """The status of every chat completion the server answered after its log had ``since`` bytes."""
    with local_llm.log_file.open("rb") as log:
        log.seek(since)
        return [int(match["status"]) for match in _CHAT_REQUEST.finditer(log.read().decode(errors="replace"))]


@pytest.fixture
def idle_llm(local_llm: LocalLLM) -> LocalLLM:
    """The server, idle. It answers one request at a time and goes on generating for a client that gave up, until the
    answer ends or its context is full (minutes for a model that rambles): one still busy with an earlier test's request
    (its /v1/models waits too) is restarted."""
    if local_llm.models() is None:
        local_llm.down()
        local_llm.up()
    return local_llm


def planner_for(local_llm: LocalLLM, schema: str) -> Planner:
    # Without the shipped runbooks nothing specific matches, so the model is asked for every incident.
    settings = LLMSettings(model=local_llm.model, base_url=local_llm.base_url, timeout=TIMEOUT, max_retries=1, schema=schema)
    return Planner(RunbookLibrary.load(builtin=False), None, llm=LLMClient(settings))


def plan_with(local_llm: LocalLLM, schema: str, failure: Failure, budget: int = BUDGET) -> tuple[Plan, LLMUse, float, list[int]]:
    """The planner's plan, what the LLM cost, the seconds the planning took and the status of each request it sent."""
    use = LLMUse(TokenBudget(budget))
    log_size = local_llm.log_file.stat().st_size
    started = time.monotonic()
    plan = planner_for(local_llm, schema).plan(failure, Diagnosis("unknown", None, {}), frozenset(), use)
    return plan, use, time.monotonic() - started, chat_statuses(local_llm, log_size)


def judged(plan: Plan, failure: Failure) -> str:
    """Judge the model's steps as the heal loop would, each alone and as one plan, and show the verdicts; nothing the guard
    BLOCKs or APPROVEs may come out of the plan as allowed."""
    context = PolicyContext.from_failure(failure)
    alone = [evaluate(step.command, context) for step in plan.steps]
    in_plan, decision = evaluate_plan([step.argv for step in plan.steps], context)
    assert [verdict.argv for verdict in in_plan] == [step.argv for step in plan.steps]
    for single, planned in zip(alone, in_plan, strict=True):
        assert planned.decision.strictness >= single.decision.strictness, (single, planned)
    assert decision is Decision.strictest([verdict.decision for verdict in in_plan])
    return f"plan decision {decision}: " + "; ".join(f"{verdict.command} -> {verdict.decision} ({verdict.rule})" for verdict in in_plan)


@pytest.mark.parametrize("schema", SCHEMAS)
@pytest.mark.parametrize("incident", INCIDENTS)
def test_a_real_model_plans_within_its_limits_and_the_guard_judges_what_it_proposes(idle_llm: LocalLLM, incident: str, schema: str) -> None:
    failure = INCIDENTS[incident]()
    plan, use, elapsed, statuses = plan_with(idle_llm, schema, failure)

    assert elapsed < TIMEOUT + TIMEOUT_SLACK
    assert use.budget.spent <= use.budget.limit
    timed_out = bool(use.fallback and "did not answer in time" in use.fallback)
    # the server took the answer's format as sent: a refusal is an error status, then the same request again without it
    # (a request the client gave up on is answered after the test, if at all)
    assert statuses == [200] or (timed_out and statuses == []), statuses
    if use.fallback is None:
        assert plan.source is PlanSource.LLM and plan.reference == idle_llm.model and use.calls == 1
        assert 0 < use.prompt_tokens[0] < use.budget.spent  # the server's count of the prompt, and the answer, charged
        assert plan.steps or plan.escalation
        outcome = judged(plan, failure) if plan.steps else f"escalates: {plan.escalation}"
    else:
        assert plan.source is not PlanSource.LLM
        assert f"({use.fallback}; the offline planner stood in)" in plan.rationale
        # whatever the model wants, the server holds its answer to a JSON grammar: the form was applied, not only taken
        assert "holds no JSON plan" not in use.fallback
        outcome = f"offline plan {[step.command for step in plan.steps]} because {use.fallback}"
    print(f"{incident}, schema {schema}: {elapsed:.1f} s, {use.budget.spent} tokens; {outcome}")


def test_llama_cpp_refuses_openais_json_schema_and_is_asked_again_without_it(idle_llm: LocalLLM) -> None:
    plan, use, elapsed, statuses = plan_with(idle_llm, "openai", nginx_stale_pidfile())
    assert elapsed < TIMEOUT + TIMEOUT_SLACK
    assert statuses[:1] == [500], statuses  # as the table of docs/docsite/rst/llm.rst says
    assert statuses[1:] in ([], [200]), statuses  # [] while the second request is still being answered
    assert use.fallback is None or "answered HTTP" not in use.fallback
    print(f"openai's json_schema: {statuses}, {elapsed:.1f} s; {use.fallback or [step.command for step in plan.steps] or plan.escalation}")


def test_the_token_budget_holds_against_the_real_prompt(idle_llm: LocalLLM) -> None:
    plan, use, _elapsed, statuses = plan_with(idle_llm, "llamacpp", postgres_invalid_parameter(), budget=500)
    assert use.fallback and "token budget is spent" in use.fallback
    assert plan.source is PlanSource.GENERIC and use.budget.spent == 0
    assert statuses == []  # nothing was sent
