"""The loop's rule, kept in every loop test: a node's ``prep`` and ``exec`` leave the IncidentState as they found it
(exec may run several times, so whatever they wrote would be written again, or half; only ``post`` writes the state).

Every node that runs on an IncidentState while a test of this directory runs is watched: the state as it was before
``prep`` must equal the state after ``exec`` (the retries and the fallback included), field by field, deep; the test
fails at its end naming the node and the field that changed."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field
from typing import Any, Iterator

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.engine import Node
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import IncidentState


def fingerprint(state: IncidentState) -> dict[str, Any]:
    """Every field of the state, deep, as copies: what a later write to the state cannot change."""
    return dataclasses.asdict(state)


def first_difference(before: Any, after: Any, where: str) -> str | None:
    """Where ``after`` first differs from ``before`` (``attempts[0].finished_at``), or None when they are equal."""
    if before == after:
        return None
    if isinstance(before, dict) and isinstance(after, dict):
        for key in [*before, *(key for key in after if key not in before)]:
            inner = f"{where}.{key}" if isinstance(key, str) and key.isidentifier() else f"{where}[{key!r}]"
            found = first_difference(before.get(key), after.get(key), inner)
            if found:
                return found
    if isinstance(before, (list, tuple)) and isinstance(after, (list, tuple)) and len(before) == len(after):
        for index, (was, now) in enumerate(zip(before, after, strict=True)):
            found = first_difference(was, now, f"{where}[{index}]")
            if found:
                return found
    return f"{where}: {before!r} -> {after!r}"


@dataclass
class NodeRuleWatch:
    """The rule's breaches among the node runs of one test."""

    breaches: list[str] = field(default_factory=list)
    # the node runs under way (a test's node may run another), each with its state and that state's fingerprint before prep
    running: list[tuple[Node[Any], IncidentState, dict[str, Any]]] = field(default_factory=list)

    def compare(self, node: Node[Any]) -> None:
        state, before = self.running[-1][1:]
        after = fingerprint(state)
        for name, was in before.items():
            found = first_difference(was, after[name], name)
            if found:
                self.breaches.append(f"{node.name}: prep or exec changed the state's {found}")


@pytest.fixture(autouse=True)
def node_rule(monkeypatch: pytest.MonkeyPatch) -> Iterator[NodeRuleWatch]:
    watch = NodeRuleWatch()
    run, exec_with_retries = Node.run, Node._exec_with_retries

    def watched_run(node: Node[Any], state: Any) -> str:
        if not isinstance(state, IncidentState):
            return run(node, state)
        watch.running.append((node, state, fingerprint(state)))
        try:
            return run(node, state)
        finally:
            watch.running.pop()

    def watched_exec(node: Node[Any], prep_res: Any) -> Any:
        exec_res = exec_with_retries(node, prep_res)
        if watch.running and watch.running[-1][0] is node:
            watch.compare(node)  # before post, which may write
        return exec_res

    monkeypatch.setattr(Node, "run", watched_run)
    monkeypatch.setattr(Node, "_exec_with_retries", watched_exec)
    yield watch
    assert not watch.breaches, "a node's prep or exec wrote the IncidentState (only post may):\n" + "\n".join(dict.fromkeys(watch.breaches))
