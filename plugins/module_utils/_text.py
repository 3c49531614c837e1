# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bounding text that leaves a host or goes to a human or a model (standard library only)."""

from __future__ import annotations

import unicodedata


def clip(text: str, limit: int, keep: str = "start") -> str:
    """At most ``limit`` characters of text, keeping its start, its end or both ends ("middle" is cut)."""
    if len(text) <= limit:
        return text
    if keep == "end":
        return "[...] " + text[-limit:]
    if keep == "middle":
        half = limit // 2
        return "%s\n[... %d characters cut ...]\n%s" % (text[:half], len(text) - 2 * half, text[-half:])
    return text[:limit] + " [...]"


def printable(text: str) -> str:
    """Text as a terminal may show it: control characters (escape sequences), format characters (bidi overrides,
    zero-width) and other invisible code points written as ``\\uXXXX``; newlines and tabs stay."""
    return "".join(
        char if char in "\n\t" or unicodedata.category(char) not in ("Cc", "Cf", "Co", "Cs", "Zl", "Zp") else "\\u%04x" % ord(char)
        for char in text
    )
