"""Runbooks (brain/runbooks.py): the shipped ones, the library that loads them, and the format's errors."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.placeholders import NotApplicable
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.reading import NOTHING_READ
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary, parse_runbook
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import RunbookError
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure


def test_no_escalation_of_a_shipped_runbook_leaves_a_placeholder_unrendered(library: RunbookLibrary) -> None:
    """Whatever the incident lacks reads as words, never as {name}; an escalation about what the reading lacks is passed
    over, as the planner passes over a runbook whose steps lack a value."""
    bare = Failure(host="h", service="svc", failure_class="not_running", summary="", evidence={}, spec={"name": "svc"})
    rendered = 0
    for runbook in library.runbooks:
        try:
            text = runbook.render_escalation(bare, {}, NOTHING_READ)
        except NotApplicable:
            assert runbook.readings, runbook.id
            continue
        rendered += 1
        assert not re.search(r"\{[a-z_]+(?::[^{}]*)?\}", text), (runbook.id, text)
    assert rendered >= 20


def test_the_shipped_runbooks_load_and_cover_the_lab_faults(library: RunbookLibrary) -> None:
    ids = {rb.id for rb in library.runbooks}
    assert {"nginx-config-error", "nginx-stale-pid", "port-conflict", "postgres-stale-postmaster", "redis-killed"} <= ids


def test_a_runbook_edited_between_two_loads_is_read_again(tmp_path: Path) -> None:
    """Each file is parsed once while it is unchanged (every heal session loads the library); an edit is seen."""
    runbook = tmp_path / "mine.md"
    front = ("---\nid: mine\ntitle: {}\nservices: [nginx]\nmatch: {{failure_class: [stale_pidfile]}}\n"
             "steps: ['service {{init_service}} restart']\n---\n")
    runbook.write_text(front.format("first"))
    assert [rb.title for rb in RunbookLibrary.load([tmp_path], builtin=False).runbooks] == ["first"]
    runbook.write_text(front.format("the second"))
    assert [rb.title for rb in RunbookLibrary.load([tmp_path], builtin=False).runbooks] == ["the second"]


@pytest.mark.parametrize(
    ("text", "field"),
    [
        ("no front matter", "front matter"),
        ("---\nid: a\ntitle: t\nservices: [x]\nsteps: [a]\nescalate: b\n---\n", "steps"),
        ("---\nid: a\ntitle: t\nservices: [x]\nsteps: [a, b, c, d]\n---\n", "steps"),
        ("---\nid: a\ntitle: t\nservices: [x]\nsteps: ['kill {pid}']\n---\n", "steps[0]"),
        ("---\nid: a\ntitle: t\nservices: [x]\nsteps: [a]\nmatch: {evidence: {status: '('}}\n---\n", "match.evidence.status"),
        ("---\nid: a\ntitle: t\nservices: [x]\nsteps: [a]\ncolour: red\n---\n", "colour"),
        ("---\ntitle: t\nservices: [x]\nsteps: [a]\n---\n", "id"),
    ],
)
def test_invalid_runbooks_name_the_file_and_field(text: str, field: str) -> None:
    with pytest.raises(RunbookError) as caught:
        parse_runbook(text, "/runbooks/bad.md")
    assert caught.value.field == field
    assert "/runbooks/bad.md" in str(caught.value)


def test_a_missing_runbook_directory_is_a_clear_error(tmp_path: Path) -> None:
    with pytest.raises(RunbookError) as caught:
        RunbookLibrary.load([tmp_path / "nope"])
    assert caught.value.field == "runbooks" and caught.value.value == str(tmp_path / "nope")
