"""The model's answer read (brain/answer_parsing.py): the tolerant parser directly, and through the real openai client
against a real HTTP server speaking the OpenAI API."""

from __future__ import annotations

import json

import pytest
from llm_planning import DRAFT, FIX, llm_planner, plan_once
from llm_server import Answer, ScriptedLLM

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.answer_parsing import parse_plan
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.llm import LLMError
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import PlanSource


@pytest.mark.parametrize(
    "content",
    [
        "Here is the plan:\n```json\n" + json.dumps({"steps": [{"argv": FIX[1]}]}) + "\n```\nGood luck!",
        "Sure. " + json.dumps({"steps": [{"argv": FIX[1]}]}) + " That should work.",
        json.dumps({"steps": [{"module": "ansible.builtin.service", "args": {"name": "nginx", "state": "started"}}]}),
    ],
)
def test_the_tolerant_parser_reads_fenced_chatty_and_module_answers(llm: ScriptedLLM, content: str) -> None:
    llm.script(Answer.text(content))
    plan, _use = plan_once(llm_planner(llm))
    assert plan.source is PlanSource.LLM and [step.argv for step in plan.steps] == [("service", "nginx", "start")]


def test_parse_plan_rejects_empty_plans() -> None:
    with pytest.raises(LLMError, match="neither steps nor a reason"):
        parse_plan('{"steps": []}', init_service="nginx")


def test_a_reasoning_preamble_is_not_read_as_the_plan(llm: ScriptedLLM) -> None:
    thoughts = f"<think>{DRAFT}</think>\n"
    llm.script(Answer.text(thoughts + json.dumps({"steps": [{"argv": argv} for argv in FIX], "rationale": "killed"})))
    plan, _use = plan_once(llm_planner(llm))
    assert plan.source is PlanSource.LLM and [step.argv for step in plan.steps] == [tuple(argv) for argv in FIX]
    llm.script(Answer.text('<think>only thinking, never done: {"steps": [{"argv": ["reboot"]}]}'))
    assert plan_once(llm_planner(llm))[0].source is PlanSource.GENERIC


def test_what_a_model_commonly_writes_becomes_the_steps_the_guard_judges() -> None:
    joined = parse_plan(json.dumps({"steps": [{"argv": ["sudo", "systemctl", "reset-failed", "nginx", "&&", "systemctl", "start", "nginx"]}]}),
                        init_service="nginx")
    assert joined.steps == (("systemctl", "reset-failed", "nginx"), ("systemctl", "start", "nginx"))
    # sudo with options is not a bare prefix: it stays, and the guard judges it as written
    assert parse_plan('{"steps": [["sudo", "-u", "postgres", "psql"]]}', init_service="x").steps == (("sudo", "-u", "postgres", "psql"),)
    with pytest.raises(LLMError, match="more than 3 steps"):
        parse_plan('{"steps": [["true", "&&", "true"], ["true", "&&", "true"]]}', init_service="x")
    with pytest.raises(LLMError, match="empty command"):
        parse_plan('{"steps": [["true", "&&"]]}', init_service="x")
