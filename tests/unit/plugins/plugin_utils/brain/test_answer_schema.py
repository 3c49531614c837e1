"""The answer's shape asked of the server (brain/answer_schema.py), through the real openai client against a real
HTTP server speaking the OpenAI API."""

from __future__ import annotations

from typing import Any

import pytest
from llm_planning import FIX, llm_planner, plan_once
from llm_server import Answer, ScriptedLLM

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.answer_schema import PLAN_SCHEMA
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import PlanSource


@pytest.mark.parametrize(("schema", "sent"), [
    ("openai", {"response_format": {"type": "json_schema", "json_schema": {"name": "plan", "schema": PLAN_SCHEMA, "strict": False}}}),
    ("llamacpp", {"response_format": {"type": "json_object", "schema": PLAN_SCHEMA}}),
    ("ollama", {"format": PLAN_SCHEMA}),
])
def test_the_plans_schema_is_sent_in_the_form_the_server_takes_and_dropped_when_refused(llm: ScriptedLLM, schema: str,
                                                                                        sent: dict[str, Any]) -> None:
    llm.script(Answer.plan(FIX))
    plan, _use = plan_once(llm_planner(llm, schema=schema))
    assert plan.source is PlanSource.LLM
    [request] = llm.chat_requests
    assert {key: request.body[key] for key in sent} == sent
    if schema != "ollama":
        llm.refuses_response_format = 500
        llm.script(Answer.plan(FIX))
        assert plan_once(llm_planner(llm, schema=schema))[0].source is PlanSource.LLM
        assert "response_format" not in llm.chat_requests[-1].body
