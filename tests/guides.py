"""The code blocks of the guides in docs/docsite/rst/, for the tests that run or check what a guide shows.

A block is a ``.. code-block:: LANGUAGE`` directive; its text is its indented content, dedented, with a final newline.
A block a test takes by name carries the ``:name:`` option under its guide's label,
``ansible_collections.sentinel.heal.docsite.GUIDE.NAME``; ``code_block(GUIDE, NAME)`` finds it. Blocks without a
name are found by their language (``code_blocks(GUIDE, "json")``).
"""

from __future__ import annotations

import re
import textwrap
from dataclasses import dataclass
from pathlib import Path

GUIDES = Path(__file__).resolve().parents[1] / "docs" / "docsite" / "rst"
LABEL = "ansible_collections.sentinel.heal.docsite."
DIRECTIVE = re.compile(r"^(?P<indent> *)\.\. code-block:: *(?P<language>\S+) *$")
OPTION = re.compile(r"^ +:(?P<key>[\w-]+):(?: +(?P<value>.*))?$")


@dataclass(frozen=True)
class CodeBlock:
    language: str
    body: str
    name: str = ""  # the part of its :name: after its guide's label
    caption: str = ""
    line: int = 0  # of the directive, from 1


def guide_path(guide: str) -> Path:
    return GUIDES / f"{guide}.rst"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def code_blocks(guide: str, language: str | None = None) -> list[CodeBlock]:
    """The guide's code blocks in the order they appear, or those of one language."""
    lines = guide_path(guide).read_text(encoding="utf-8").splitlines()
    prefix = f"{LABEL}{guide}."
    found = []
    index = 0
    while index < len(lines):
        directive = DIRECTIVE.match(lines[index])
        index += 1
        if directive is None:
            continue
        start, depth = index, len(directive["indent"])
        options = {}
        while index < len(lines) and (option := OPTION.match(lines[index])) and _indent(lines[index]) > depth:
            options[option["key"]] = (option["value"] or "").strip()
            index += 1
        content = []
        while index < len(lines) and (not lines[index].strip() or _indent(lines[index]) > depth):
            content.append(lines[index])
            index += 1
        body = textwrap.dedent("\n".join(content)).strip("\n")
        name = options.get("name", "")
        assert not name or name.startswith(prefix), f"{guide_path(guide)}:{start}: the block's name {name!r} is not under {prefix}"
        found.append(CodeBlock(directive["language"], body + "\n", name.removeprefix(prefix), options.get("caption", ""), start))
    return [block for block in found if language is None or block.language == language]


def code_block(guide: str, name: str) -> CodeBlock:
    """The block of the guide with this name (the last part of its ``:name:``)."""
    named = [block for block in code_blocks(guide) if block.name == name]
    assert len(named) == 1, f"{guide_path(guide)} has {len(named)} code blocks named {LABEL}{guide}.{name}"
    return named[0]
