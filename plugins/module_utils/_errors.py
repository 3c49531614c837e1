"""The root of sentinel.heal's one exception hierarchy, where both sides can reach it.

Target-side code (the argv judge and the policy language, which the executor on each host runs too) raises these; the
controller's errors (``plugin_utils.errors``) derive from them. Every error names the field it is about, the value that
was wrong and what to do.
"""

from __future__ import annotations

from typing import Any


class SentinelError(Exception):
    """Base of every error sentinel.heal raises on purpose."""

    def __init__(self, message: str, *, field: str | None = None, value: Any = None, hint: str | None = None) -> None:
        self.message = message
        self.field = field
        self.value = value
        self.hint = hint
        super().__init__(self.describe())

    def describe(self) -> str:
        parts = [self.message]
        if self.field is not None:
            parts.append(f"field: {self.field}")
            parts.append(f"value: {self.value!r}")
        if self.hint:
            parts.append(f"fix: {self.hint}")
        return "; ".join(parts)


class ConfigError(SentinelError):
    """A user-supplied option, policy or runbook is invalid."""


class PolicyFileError(ConfigError):
    """The command policy file cannot be loaded."""
