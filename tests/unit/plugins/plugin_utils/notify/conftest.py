"""The recording server of notify_cases, one per test."""

from __future__ import annotations

from typing import Iterator

import pytest
from notify_cases import Recorder, recording_server


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    with recording_server() as server:
        yield server
