"""Text bounded and made safe for a person's terminal."""

from __future__ import annotations

import time

import pytest

from ansible_collections.sentinel.heal.plugins.module_utils._text import clip, moment, printable, relative


def test_escape_sequences_bidi_overrides_and_invisible_characters_are_shown_escaped() -> None:
    rationale = "restart it\x1b]0;owned\x07 \u202eevil\u202c\u200b done\nnext line\tok"
    assert printable(rationale) == "restart it\\u001b]0;owned\\u0007 \\u202eevil\\u202c\\u200b done\nnext line\tok"
    assert printable("nginx: réseau, 端口 80") == "nginx: réseau, 端口 80"  # letters of any script stay


def test_clip_keeps_the_start_the_end_or_both() -> None:
    assert clip("abcdef", 10) == "abcdef" and clip("abcdef", 3) == "abc [...]" and clip("abcdef", 3, keep="end") == "[...] def"


@pytest.mark.parametrize(("seconds", "said"), [
    (0.2, "now"), (5, "in 5 s"), (1380, "in 23 min"), (11107, "in 3 h 5 min"), (2 * 86400 + 60, "in 2 d"), (-185, "3 min 5 s ago"),
    (-7200, "2 h ago"),
])
def test_a_span_from_now_reads_in_its_two_largest_units(seconds: float, said: str) -> None:
    assert relative(seconds) == said


def test_a_moment_shown_to_a_person_is_iso_8601_with_its_offset_and_how_far_from_now(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("TZ", "CET-1")  # a POSIX rule: no time zone database of the machine read
    time.tzset()
    try:
        assert moment(1764626400 + 1380, now=1764626400) == "2025-12-01T23:23:00+01:00, in 23 min"
    finally:
        monkeypatch.delenv("TZ")
        time.tzset()
