"""No unit test reads the packages, services or /etc of the machine it runs on: each gets an empty host of its own."""

from __future__ import annotations

from pathlib import Path

import pytest
from empty_host import settings


@pytest.fixture(autouse=True)
def empty_host(tmp_path_factory: pytest.TempPathFactory, monkeypatch: pytest.MonkeyPatch) -> Path:
    """The root of the host the probe reads in this test (tests/empty_host.py); a test puts there what the host has."""
    root = tmp_path_factory.mktemp("host")
    for (module, setting), value in settings(root).items():
        monkeypatch.setattr(module, setting, value)
    return root
