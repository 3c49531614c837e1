"""What the controller's tests share: the scripted OpenAI-compatible server (tests/llm_server.py) the LLM tests ask, one
per test."""

from __future__ import annotations

from typing import Iterator

import pytest
from llm_server import ScriptedLLM


@pytest.fixture
def llm() -> Iterator[ScriptedLLM]:
    with ScriptedLLM() as server:
        yield server
