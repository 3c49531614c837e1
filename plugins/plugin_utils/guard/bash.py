"""How bash itself would read a command line, through tree-sitter-bash's grammar.

The guard splits commands with :mod:`shlex` and refuses shell syntax before it does. This second,
independent reading is the cross-check: a command is only judged when bash's grammar sees one
simple command made of literal words, and exactly the words shlex produced. Anything else (an
assignment, an expansion, a comment, a keyword, a second command, a parse error) is a disagreement.
"""

from __future__ import annotations

from functools import cache
from typing import TYPE_CHECKING

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import PolicyEngineUnavailable

if TYPE_CHECKING:
    from tree_sitter import Node, Parser

# Literal word nodes and how their value is read; nothing in them expands once the guard has
# refused ``$``, backticks and backslashes.
_LITERALS = frozenset({"word", "number", "raw_string", "string", "concatenation"})


def bash_words(command: str) -> tuple[str, ...] | None:
    """The argv bash would run for ``command``, or None when bash would read more than one simple
    command of literal words into it. Raises PolicyEngineUnavailable without the grammar."""
    tree = _parser().parse(command.encode("ascii"))
    root = tree.root_node
    if root.has_error or root.child_count != 1 or root.children[0].type != "command":
        return None
    words: list[str] = []
    for node in root.children[0].children:
        if node.type == "command_name":
            if node.child_count != 1:
                return None
            node = node.children[0]
        value = _literal(node)
        if value is None:
            return None
        words.append(value)
    return tuple(words)


def _literal(node: Node) -> str | None:
    if node.type not in _LITERALS:
        return None
    text = (node.text or b"").decode("ascii")
    if node.type in ("word", "number"):
        return text
    if node.type == "raw_string":
        return text[1:-1]
    if node.type == "string":
        if any(child.type not in ('"', "string_content") for child in node.children):
            return None
        return "".join((child.text or b"").decode("ascii") for child in node.children if child.type == "string_content")
    parts = [_literal(child) for child in node.children]
    return None if any(part is None for part in parts) else "".join(part or "" for part in parts)


@cache
def _parser() -> Parser:
    try:
        import tree_sitter_bash
        from tree_sitter import Language, Parser
    except ImportError as exc:
        raise PolicyEngineUnavailable("the bash grammar that cross-checks every command is not installed", field="python package",
                                      value=exc.name, hint="pip install -r requirements.txt on the controller") from exc
    return Parser(Language(tree_sitter_bash.language()))
