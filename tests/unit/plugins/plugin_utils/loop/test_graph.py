"""The graph's picture cannot drift from its edges: graph.py's docstring holds every edge of EDGES as drawn here, and
its hand-drawn picture uses none that EDGES lacks."""

from __future__ import annotations

import re
from typing import Mapping

from ansible_collections.sentinel.heal.plugins.plugin_utils.loop import graph
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.engine import DEFAULT_ACTION

WRAP = 120
TABLE_START = "when the two differ; the picture above must use only these):\n\n"


def draw(edges: Mapping[str, Mapping[str, str]]) -> str:
    """Each node's routes on its own line, ``─action─▶ target`` (``─▶ target`` for the default), wrapped at WRAP."""
    width = max(len(node) for node in edges)
    lines = []
    for node, routes in edges.items():
        arrows = ["─▶ " + target if action == DEFAULT_ACTION else f"─{action}─▶ {target}" for action, target in routes.items()]
        head = f"    {node:<{width}} "
        current = head + arrows[0]
        for arrow in arrows[1:]:
            if len(current) + len(" · " + arrow) > WRAP:
                lines.append(current)
                current = " " * len(head) + "· " + arrow
            else:
                current += " · " + arrow
        lines.append(current)
    return "\n".join(lines)


def _docstring() -> str:
    assert graph.__doc__ is not None
    return graph.__doc__


def test_the_docstring_holds_every_edge_as_edges_has_it() -> None:
    doc = _docstring()
    table = doc[doc.index(TABLE_START) + len(TABLE_START):].split("\n\n", 1)[0]
    assert table == draw(graph.EDGES), "redraw graph.py's table of edges from EDGES:\n" + draw(graph.EDGES)


def test_the_picture_uses_only_edges_the_graph_has() -> None:
    picture = _docstring().split(TABLE_START, 1)[0]
    routes = {(action, target) for node_routes in graph.EDGES.values() for action, target in node_routes.items()}
    drawn = set()
    for labels, target in re.findall(r"─([\w/]*)─*▶ (\w+)", picture):
        drawn |= {(label or DEFAULT_ACTION, target) for label in labels.split("/")}
    assert drawn, "the picture has no edge drawn as ─action─▶ target"
    assert drawn <= routes, f"the picture draws edges the graph lacks: {sorted(drawn - routes)}"
