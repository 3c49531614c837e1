# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bounding text that leaves a host or goes to a human or a model (standard library only)."""

from __future__ import annotations

import time
import unicodedata
from datetime import datetime


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


def moment(at: float, now: float | None = None) -> str:
    """A time as a person reads it: ISO 8601 in the host's zone, with its offset, and how far it is from now
    (``2026-12-01T21:50:00+00:00, in 23 min``); machine fields keep their epoch seconds."""
    now = time.time() if now is None else now
    return "%s, %s" % (clock_time(at), relative(at - now))


def clock_time(at: float) -> str:
    """A time in ISO 8601 in the host's zone, with its offset, to the second."""
    return datetime.fromtimestamp(at).astimezone().isoformat(timespec="seconds")


def relative(seconds: float) -> str:
    """``in 23 min``, ``3 h 5 min ago``, ``now``: a span from now in the two largest units that matter."""
    said = span(seconds)
    if said == "0 s":
        return "now"
    return "in %s" % said if seconds > 0 else "%s ago" % said


def span(seconds: float) -> str:
    """``2 min 10 s``, ``3 h 5 min``, ``0 s``: a length of time in the two largest units that matter."""
    left = round(abs(seconds))
    parts: list[str] = []
    for name, size in (("d", 86400), ("h", 3600), ("min", 60), ("s", 1)):
        if left >= size and len(parts) < 2:
            parts.append("%d %s" % (left // size, name))
            left %= size
        elif parts:
            break
    return " ".join(parts) or "0 s"
