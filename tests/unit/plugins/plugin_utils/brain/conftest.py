"""What the brain's tests share: the shipped runbooks, loaded once per module, and the scripted OpenAI-compatible server
(tests/llm_server.py) the LLM tests ask, one per test."""

from __future__ import annotations

from typing import Iterator

import pytest
from llm_server import ScriptedLLM

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary


@pytest.fixture(scope="module")
def library() -> RunbookLibrary:
    return RunbookLibrary.load()


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server
