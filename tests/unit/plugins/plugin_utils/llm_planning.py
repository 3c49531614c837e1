"""The planner asking an LLM client on the scripted server (tests/llm_server.py), as the brain's LLM tests build and
ask it (test_llm, test_answer_parsing, test_answer_schema); the server itself is their ``llm`` fixture
(brain/conftest.py)."""

from __future__ import annotations

from typing import Any

from llm_server import ScriptedLLM

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.llm import LLMClient, LLMSettings, TokenBudget
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import Diagnosis, LLMUse, Planner
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory
from helpers import nginx_failure

FIX = [["rm", "-f", "/run/nginx.pid"], ["service", "nginx", "start"]]
# a draft in a reasoning model's thoughts, never the plan
DRAFT = 'nginx is down {maybe}; a draft: {"steps": [{"argv": ["rm", "-rf", "/etc/nginx"]}]} - no, start it'
KEY = "sk-unit-test-key-0123456789"  # the key llm_client gives the LLM


def llm_client(llm: ScriptedLLM, **overrides: Any) -> LLMClient:
    settings = dict(model="scripted-model", base_url=llm.base_url, api_key=KEY, timeout=5.0, max_retries=2)
    settings.update(overrides)
    return LLMClient(LLMSettings(**settings), sleep=lambda seconds: None)


def llm_planner(llm: ScriptedLLM, memory: Memory | None = None, **overrides: Any) -> Planner:
    # Without the shipped runbooks, nothing specific matches: the LLM is asked.
    return Planner(RunbookLibrary.load(builtin=False), memory, llm=llm_client(llm, **overrides), secrets=["hunter2-secret"])


def plan_once(planner: Planner, failure: Any = None, excluded: frozenset[tuple[str, ...]] = frozenset(), budget: int = 6000) -> tuple[Any, LLMUse]:
    use = LLMUse(TokenBudget(budget))
    failure = failure or nginx_failure()
    return planner.plan(failure, Diagnosis("d", None, {}), excluded, use), use
