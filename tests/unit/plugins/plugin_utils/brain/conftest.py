"""What the brain's tests share: the shipped runbooks, loaded once per module (the scripted LLM server is the ``llm``
fixture of plugin_utils/conftest.py)."""

from __future__ import annotations

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary


@pytest.fixture(scope="module")
def library() -> RunbookLibrary:
    return RunbookLibrary.load()
