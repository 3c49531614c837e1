"""The maintenance marker, read from real files, and what the controller makes of it."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ansible_collections.sentinel.heal.plugins.module_utils._host.maintenance import marker_holds, read_marker


def _marker(tmp_path: Path, text: str, owner: int = 0) -> str:
    path = tmp_path / "maintenance"
    path.write_text(text)
    os.chown(path, owner, owner)
    return str(path)


def test_no_marker_is_no_maintenance(tmp_path: Path) -> None:
    assert read_marker(str(tmp_path / "maintenance")) is None
    assert marker_holds(None, "nginx", 0.0) is None


def test_an_empty_marker_holds_the_whole_host_until_it_is_removed(tmp_path: Path) -> None:
    marker = read_marker(_marker(tmp_path, ""))
    assert marker is not None and marker["problem"] is None and (marker["services"], marker["until"]) == ([], None)
    assert marker_holds(marker, "postgresql", 1e12) == f"in maintenance until it is removed ({tmp_path / 'maintenance'})"


def test_a_marker_names_who_why_which_services_and_until_when(tmp_path: Path) -> None:
    marker = read_marker(_marker(tmp_path, "# swapping disks\nreason: new disk\nservices: nginx, redis\nuntil: 2030-01-01T18:00+00:00\nby: alice\n"))
    assert marker is not None and marker["problem"] is None
    assert (marker["reason"], marker["services"], marker["until"], marker["by"]) == ("new disk", ["nginx", "redis"], 1893520800.0, "alice")
    held = marker_holds(marker, "nginx", 1893520000.0)
    assert held is not None and held.startswith("in maintenance by alice until ") and held.endswith(": new disk")
    assert marker_holds(marker, "postgresql", 1893520000.0) is None  # not its service
    assert marker_holds(marker, "nginx", 1893520801.0) is None  # past its until


@pytest.mark.parametrize(("text", "owner", "problem"), [
    ("services nginx\n", 0, "line 1, 'services nginx', is not 'KEY: VALUE' with a KEY of reason, services, until, by"),
    ("until: tomorrow evening\n", 0, "line 1: until 'tomorrow evening' is not an ISO 8601 time"),
    ("reason: x\n", 1000, "is not owned by root (uid 1000)"),
])
def test_a_marker_that_cannot_be_read_as_written_means_hands_off_with_the_problem(tmp_path: Path, text: str, owner: int, problem: str) -> None:
    marker = read_marker(_marker(tmp_path, text, owner))
    assert marker is not None and str(marker["problem"]).startswith(problem)
    held = marker_holds(marker, "nginx", 0.0)
    assert held is not None and held.startswith("held back: the host's maintenance marker") and problem in held
