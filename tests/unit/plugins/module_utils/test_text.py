"""Text bounded and made safe for a person's terminal."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.module_utils._text import clip, printable


def test_escape_sequences_bidi_overrides_and_invisible_characters_are_shown_escaped() -> None:
    rationale = "restart it\x1b]0;owned\x07 \u202eevil\u202c\u200b done\nnext line\tok"
    assert printable(rationale) == "restart it\\u001b]0;owned\\u0007 \\u202eevil\\u202c\\u200b done\nnext line\tok"
    assert printable("nginx: réseau, 端口 80") == "nginx: réseau, 端口 80"  # letters of any script stay


def test_clip_keeps_the_start_the_end_or_both() -> None:
    assert clip("abcdef", 10) == "abcdef" and clip("abcdef", 3) == "abc [...]" and clip("abcdef", 3, keep="end") == "[...] def"
