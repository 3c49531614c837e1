"""Output filters: what a model writes after a pipe (``journalctl -u nginx | tail -n 50``), applied on the controller.

A plan's steps run without a shell, so a pipe would reach the host as an argument and the guard would refuse the
command. A read-only command piped into a filter means: run the command, keep part of its output. Only filters that
read their input and nothing else are understood (``tail``/``head`` with a line count, ``grep`` with a pattern and
the flags -i -v -E -F -w); the step then runs the command alone, the guard judges the command alone, and the filter
is applied to the step's output here. Anything else after a pipe stays in the argv, where the guard sees it.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, replace
from typing import Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import StepResult

PIPE = "|"
DEFAULT_LINES = 10
MAX_LINES = 10000
_COUNT = re.compile(r"^\d{1,5}$")
_GREP_FLAGS = frozenset("ivEFw")
# grep's basic regular expressions spell alternation, groups and repetition with a backslash
_BRE = {r"\|": "|", r"\(": "(", r"\)": ")", r"\+": "+", r"\?": "?", r"\{": "{", r"\}": "}"}


@dataclass(frozen=True)
class OutputFilter:
    """One stage after a pipe: keep the last or first lines, or the lines that match (or not)."""

    kind: str  # tail | head | grep
    lines: int = DEFAULT_LINES
    pattern: re.Pattern[str] | None = None
    invert: bool = False
    written: str = ""  # as the model wrote it, for people and for the plan's record

    def apply(self, text: str) -> str:
        lines = text.splitlines()
        if self.kind == "tail":
            lines = lines[-self.lines:] if self.lines else []
        elif self.kind == "head":
            lines = lines[:self.lines]
        elif self.pattern is not None:
            lines = [line for line in lines if bool(self.pattern.search(line)) != self.invert]
        return "\n".join(lines)


def split_pipeline(argv: Sequence[str]) -> tuple[tuple[str, ...], tuple[OutputFilter, ...]] | None:
    """The command and its filters, when every stage after the first pipe is a filter understood here; else None."""
    if PIPE not in argv:
        return None
    stages: list[list[str]] = [[]]
    for word in argv:
        if word == PIPE:
            stages.append([])
        else:
            stages[-1].append(word)
    command, *rest = stages
    filters = [parse_filter(stage) for stage in rest]
    if not command or any(found is None for found in filters):
        return None
    return tuple(command), tuple(found for found in filters if found is not None)


def parse_filter(argv: Sequence[str]) -> OutputFilter | None:
    """``tail``/``head`` [-n N | -N | -nN | --lines=N], or ``grep`` [-ivEFw...] [-e] PATTERN; None for anything else."""
    if not argv:
        return None
    name, *args = argv
    written = shlex.join(argv)
    if name in ("tail", "head"):
        count = _line_count(args)
        return None if count is None else OutputFilter(kind=name, lines=count, written=written)
    if name == "grep":
        return _grep(args, written)
    return None


def _line_count(args: Sequence[str]) -> int | None:
    if not args:
        return DEFAULT_LINES
    if len(args) == 2 and args[0] in ("-n", "--lines") and _COUNT.match(args[1]):
        text = args[1]
    elif len(args) == 1 and (args[0].startswith("--lines=") or args[0].startswith("-n") or args[0][1:].isdigit()):
        text = args[0].removeprefix("--lines=").removeprefix("-n").removeprefix("-")
    else:
        return None
    return min(int(text), MAX_LINES) if _COUNT.match(text) else None


def _grep(args: Sequence[str], written: str) -> OutputFilter | None:
    flags: set[str] = set()
    pattern: str | None = None
    words = list(args)
    while words:
        word = words.pop(0)
        if word == "-e" and words and pattern is None:
            pattern = words.pop(0)
        elif word.startswith("-") and len(word) > 1 and pattern is None and set(word[1:]) <= _GREP_FLAGS:
            flags |= set(word[1:])
        elif pattern is None and not words:
            pattern = word
        else:
            return None  # a second pattern, a file operand or a flag not understood here
    if pattern is None or ("E" in flags and "F" in flags):
        return None
    if "F" in flags:
        expression = re.escape(pattern)
    elif "E" in flags:
        expression = pattern
    else:
        expression = re.sub(r"\\[|()+?{}]", lambda match: _BRE[match.group(0)], re.sub(r"(?<!\\)([|()+?{}])", r"\\\1", pattern))
    if "w" in flags:
        expression = rf"\b(?:{expression})\b"
    try:
        compiled = re.compile(expression, re.IGNORECASE if "i" in flags else 0)
    except re.error:
        return None
    return OutputFilter(kind="grep", pattern=compiled, invert="v" in flags, written=written)


def filtered(result: StepResult, filters: Sequence[str]) -> StepResult:
    """The step's result with its filters (as written) applied to its standard output."""
    stages = [parse_filter(shlex.split(stage)) for stage in filters]
    stdout = result.stdout
    for stage in stages:
        if stage is not None:
            stdout = stage.apply(stdout)
    return replace(result, stdout=stdout) if filters else result
