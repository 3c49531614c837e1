# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Bounding text that leaves a host or goes to a human or a model (standard library only)."""

from __future__ import annotations


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
