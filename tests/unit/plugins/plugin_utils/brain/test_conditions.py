"""Runbooks' structured conditions (match.query) and values (vars): JMESPath over the incident document."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.conditions import compile_query, incident_document, jmespath_true
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import NotApplicable, parse_runbook
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError, RunbookError
from helpers import nginx_failure

SQUATTER = {"pid": 4242, "process": "python3", "cmdline": "python3 -m http.server 80"}


def runbook(front: str) -> Any:
    return parse_runbook(f"---\nid: t\ntitle: a test runbook\nservices: [nginx]\n{front}\n---\nbody\n", "/runbooks/t.md")


@pytest.mark.parametrize(("value", "true"), [
    (None, False), (False, False), ("", False), ([], False), ({}, False),
    (0, True), (0.0, True), (True, True), ("no", True), ([None], True), ({"a": None}, True),
])
def test_truth_is_jmespaths_own(value: Any, true: bool) -> None:
    assert jmespath_true(value) is true


def test_the_incident_document_holds_the_structured_evidence_and_the_outputs() -> None:
    document = incident_document(nginx_failure("port_conflict", owner=SQUATTER), {"nginx -t": "syntax is ok"})
    assert document["service"] == "nginx" and document["failure_class"] == "port_conflict"
    assert document["evidence"]["port_owners"][0]["pid"] == 4242
    assert document["outputs"] == {"nginx -t": "syntax is ok"} and document["reading"] is None and document["unit"] is None
    assert compile_query("evidence.port_owners[?process != 'nginx'].pid | [0]", field="q").search(document) == 4242


def test_a_query_matches_with_the_class_and_the_regexes_and_only_when_all_hold() -> None:
    book = runbook('match:\n  failure_class: [port_conflict]\n  evidence: {summary: "held by"}\n'
                   '  query: ["evidence.port_owners[?process != \'nginx\']", "spec.ports[0] == `80`"]\nsteps: ["kill -TERM {port_owner_pid}"]')
    assert book.matches(nginx_failure("port_conflict", owner=SQUATTER), {})
    # nginx itself holds the port: the structure says it is not another process's
    assert not book.matches(nginx_failure("port_conflict", owner={**SQUATTER, "process": "nginx"}), {})
    assert not book.matches(nginx_failure("not_running"), {})
    # the query is one more condition: it ranks above the same runbook without it
    plain = runbook('match:\n  failure_class: [port_conflict]\n  evidence: {summary: "held by"}\nsteps: ["kill -TERM {port_owner_pid}"]')
    assert book.specificity > plain.specificity


def test_a_single_query_may_be_written_as_text() -> None:
    book = runbook('match:\n  query: "evidence.pidfile.exists && !(evidence.pidfile.alive)"\nsteps: ["rm -f {stale_pidfile}"]')
    assert book.matches(nginx_failure("stale_pidfile"), {}) and not book.matches(nginx_failure("not_running"), {})


def test_missing_fields_and_type_errors_answer_nothing_instead_of_failing() -> None:
    failure = nginx_failure("stale_pidfile")
    assert not runbook('match:\n  query: evidence.disk.full\nsteps: ["service {init_service} start"]').matches(failure, {})
    # length() of a boolean is a type error while evaluating: the condition does not hold, and nothing raises
    typed = runbook('match:\n  query: "length(evidence.pidfile.alive) > `0`"\nsteps: ["service {init_service} start"]')
    assert not typed.matches(failure, {})
    # the outputs of evidence commands are there by command
    outputs = runbook('match:\n  query: "contains(outputs.\\"nginx -t\\", \'syntax is ok\')"\nsteps: ["service {init_service} start"]')
    assert outputs.matches(failure, {"nginx -t": "nginx: the configuration file syntax is ok"}) and not outputs.matches(failure, {})


@pytest.mark.parametrize(("front", "field", "said"), [
    ("match:\n  query: 'evidence.['", "match.query[0]", "Invalid jmespath expression"),
    ("match:\n  query: ['service', 'nosuch(evidence)']", "match.query[1]", "unknown function: nosuch()"),
    ("match:\n  query: 'length(evidence, summary)'", "match.query[0]", "length() takes 1 argument(s), got 2"),
    ("match:\n  query: 'max_by(evidence.processes)'", "match.query[0]", "max_by() takes 2 argument(s), got 1"),
    ("match:\n  query: ['']", "match.query[0]", "required text"),
    ("vars:\n  target: 'evidence.paths[?'", "vars.target", "Incomplete expression"),
])
def test_a_bad_expression_fails_the_load_naming_file_field_expression_and_jmespaths_words(front: str, field: str, said: str) -> None:
    with pytest.raises(RunbookError) as caught:
        runbook(front + '\nsteps: ["service {init_service} start"]')
    assert caught.value.field == field and "/runbooks/t.md" in str(caught.value) and said in str(caught.value)
    assert isinstance(caught.value, ConfigError)


def test_vars_fill_steps_and_escalations_from_the_structure() -> None:
    book = runbook("vars:\n  squatter: evidence.port_owners[?process != 'nginx'].pid | [0]\n"
                   "  squatter_name: evidence.port_owners[0].cmdline\nsteps: ['kill -TERM {squatter}', 'service {init_service} start']")
    steps = book.render_steps(nginx_failure("port_conflict", owner=SQUATTER))
    assert [step.argv for step in steps] == [("kill", "-TERM", "4242"), ("service", "nginx", "start")]
    assert steps[0].template == "kill -TERM {squatter}"  # memory keeps the template, to fill it from the next incident
    told = runbook("vars:\n  squatter_name: evidence.port_owners[0].cmdline\nescalate: '{squatter_name} holds the port'")
    assert told.render_escalation(nginx_failure("port_conflict", owner=SQUATTER), {}) == "python3 -m http.server 80 holds the port"


@pytest.mark.parametrize(("owners", "why"), [
    ([], "null: no port owner"),
    ([{**SQUATTER, "pid": ""}], "empty text"),
    ([{**SQUATTER, "pid": [4242, 4243]}], "a list"),
    ([{**SQUATTER, "pid": {"main": 4242}}], "an object"),
    ([{**SQUATTER, "pid": True}], "a boolean"),
    ([{**SQUATTER, "pid": "4242; reboot"}], "not one plain argument"),
    ([{**SQUATTER, "pid": "42 43"}], "two arguments"),
])
def test_a_var_that_is_not_one_plain_value_makes_the_runbook_not_apply(owners: list[dict[str, Any]], why: str) -> None:
    book = runbook("vars:\n  squatter: evidence.port_owners[0].pid\nsteps: ['kill -TERM {squatter}', 'service {init_service} start']")
    failure = nginx_failure("port_conflict")
    failure = dataclasses.replace(failure, evidence={**failure.evidence, "port_owners": owners})
    with pytest.raises(NotApplicable):
        book.render_steps(failure)
    escalation = runbook("vars:\n  squatter: evidence.port_owners[0].pid\nescalate: 'pid {squatter} holds the port'")
    if why in ("not one plain argument", "two arguments"):
        assert escalation.render_escalation(failure, {}) == f"pid {owners[0]['pid']} holds the port"  # text for people
    else:
        with pytest.raises(NotApplicable):
            escalation.render_escalation(failure, {})


@pytest.mark.parametrize(("front", "field"), [
    ("vars:\n  stale_pidfile: evidence.pidfile.path\nsteps: ['rm -f {stale_pidfile}']", "vars.stale_pidfile"),
    ("vars:\n  Target: evidence.pidfile.path\nsteps: ['rm -f {Target}']", "vars.Target"),
    ("vars: [evidence.pidfile.path]\nsteps: ['rm -f {target}']", "vars"),
    ("vars:\n  target: evidence.pidfile.path\nsteps: ['rm -f {other}']", "steps[0]"),
])
def test_vars_are_new_placeholders_and_steps_may_use_only_known_ones(front: str, field: str) -> None:
    with pytest.raises(RunbookError) as caught:
        runbook(front)
    assert caught.value.field == field
