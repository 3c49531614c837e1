"""A small explicit graph of nodes: the shape of the heal loop.

Each node runs in three steps: ``prep`` reads what it needs from the shared state, ``exec``
does the work (and may be retried with a wait, then fall back), ``post`` writes the outcome
back and names the action that picks the next node. A :class:`Flow` follows the named
transitions and records the path, so a test can assert exactly which way an incident went.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field
from typing import Any, Callable, Generic, Mapping, TypeVar

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import FlowError

State = TypeVar("State")

DEFAULT_ACTION = "default"


class Node(Generic[State]):
    """One step of a flow. Subclasses override the parts they need.

    ``exec`` must not touch the shared state: it may run several times (``max_retries``), so
    everything it needs comes from ``prep`` and everything it learns goes out through ``post``.
    """

    def __init__(self, *, max_retries: int = 1, wait: float = 0.0, sleep: Callable[[float], None] = time.sleep) -> None:
        if max_retries < 1:
            raise ValueError(f"max_retries must be at least 1, got {max_retries}")
        self.max_retries = max_retries
        self.wait = wait
        self._sleep = sleep

    @property
    def name(self) -> str:
        return type(self).__name__

    def prep(self, state: State) -> Any:
        return None

    def exec(self, prep_res: Any) -> Any:
        return None

    def exec_fallback(self, prep_res: Any, exc: Exception) -> Any:
        raise exc

    def post(self, state: State, prep_res: Any, exec_res: Any) -> str:
        return DEFAULT_ACTION

    def run(self, state: State) -> str:
        prep_res = self.prep(state)
        exec_res = self._exec_with_retries(prep_res)
        return self.post(state, prep_res, exec_res)

    def _exec_with_retries(self, prep_res: Any) -> Any:
        for attempt in range(1, self.max_retries + 1):
            try:
                return self.exec(prep_res)
            except Exception as exc:  # noqa: BLE001 - any failure of exec is retried, then handed to the fallback
                if attempt == self.max_retries:
                    return self.exec_fallback(prep_res, exc)
                if self.wait > 0:
                    self._sleep(self.wait)
        raise AssertionError("unreachable: the loop returns or falls back")


@dataclass(frozen=True)
class Transition:
    node: str
    action: str
    next_node: str | None


@dataclass
class FlowTrace:
    """The path an incident took: every node that ran, the action it returned, where it led."""

    transitions: list[Transition] = field(default_factory=list)

    @property
    def path(self) -> list[str]:
        return [t.node for t in self.transitions]


class Flow(Generic[State]):
    """Runs nodes from ``start`` following ``edges`` until a node without outgoing edges ends it.

    ``edges`` maps a node name to ``{action: next node name}``. A node with edges that returns an
    action it has no edge for is a bug in the graph and raises :class:`FlowError` rather than
    silently stopping: an incident must never end in an unnamed state.
    """

    def __init__(
        self,
        *,
        start: str,
        nodes: Mapping[str, Node[State]],
        edges: Mapping[str, Mapping[str, str]],
        max_steps: int = 200,
        entering: Callable[[str, State], None] | None = None,
    ) -> None:
        unknown = {start} | set(edges) | {target for routes in edges.values() for target in routes.values()}
        missing = sorted(unknown - set(nodes))
        if missing:
            raise FlowError("the flow names nodes that do not exist", field="edges", value=missing)
        self.start = start
        self.nodes = dict(nodes)
        self.edges = {name: dict(routes) for name, routes in edges.items()}
        self.max_steps = max_steps
        # told the name of each node before it runs (progress on a terminal)
        self.entering = entering

    def run(self, state: State) -> FlowTrace:
        trace = FlowTrace()
        current: str | None = self.start
        while current is not None:
            if len(trace.transitions) >= self.max_steps:
                raise FlowError(
                    "the flow did not end within its step limit", field="max_steps", value=self.max_steps,
                    hint="a retry budget is missing or a transition loops",
                )
            if self.entering is not None:
                self.entering(current, state)
            action = self.nodes[current].run(state)
            routes = self.edges.get(current)
            if not routes:
                trace.transitions.append(Transition(current, action, None))
                break
            if action not in routes:
                raise FlowError(
                    f"node {current!r} returned an action it has no transition for",
                    field="action", value=action, hint=f"known actions: {sorted(routes)}",
                )
            trace.transitions.append(Transition(current, action, routes[action]))
            current = routes[action]
        return trace
