from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import FlowError
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.engine import DEFAULT_ACTION, Flow, Node


class Counter(Node[dict]):
    """Counts its runs in the state and routes on the count."""

    def __init__(self, label: str, route: Any = None, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.label = label
        self.route = route or (lambda state: DEFAULT_ACTION)

    def post(self, state: dict, prep_res: Any, exec_res: Any) -> str:
        state.setdefault("runs", []).append(self.label)
        return self.route(state)


class Flaky(Node[dict]):
    """exec fails the first `failures` times."""

    def __init__(self, failures: int, fallback: bool = False, **kwargs: Any) -> None:
        super().__init__(**kwargs)
        self.failures = failures
        self.calls = 0
        self.fallback = fallback

    def exec(self, prep_res: Any) -> str:
        self.calls += 1
        if self.calls <= self.failures:
            raise RuntimeError(f"failure {self.calls}")
        return "ok"

    def exec_fallback(self, prep_res: Any, exc: Exception) -> str:
        if self.fallback:
            return f"fallback after {exc}"
        raise exc

    def post(self, state: dict, prep_res: Any, exec_res: Any) -> str:
        state["result"] = exec_res
        return DEFAULT_ACTION


def test_flow_follows_named_transitions_and_records_the_path() -> None:
    attempts = {"n": 0}

    def verify_route(state: dict) -> str:
        attempts["n"] += 1
        return "healthy" if attempts["n"] == 2 else "failing"

    flow: Flow[dict] = Flow(
        start="a",
        nodes={"a": Counter("a"), "b": Counter("b", verify_route), "done": Counter("done")},
        edges={"a": {DEFAULT_ACTION: "b"}, "b": {"failing": "a", "healthy": "done"}},
    )
    state: dict = {}
    trace = flow.run(state)
    assert trace.path == ["a", "b", "a", "b", "done"]
    assert [t.action for t in trace.transitions] == [DEFAULT_ACTION, "failing", DEFAULT_ACTION, "healthy", DEFAULT_ACTION]
    assert trace.transitions[-1].next_node is None
    assert state["runs"] == ["a", "b", "a", "b", "done"]


def test_unknown_action_is_an_error_not_a_silent_stop() -> None:
    flow: Flow[dict] = Flow(start="a", nodes={"a": Counter("a", lambda s: "surprise"), "b": Counter("b")}, edges={"a": {"x": "b"}})
    with pytest.raises(FlowError) as caught:
        flow.run({})
    assert caught.value.field == "action" and caught.value.value == "surprise"


def test_edges_naming_missing_nodes_are_rejected_at_construction() -> None:
    with pytest.raises(FlowError) as caught:
        Flow(start="a", nodes={"a": Counter("a")}, edges={"a": {DEFAULT_ACTION: "ghost"}})
    assert caught.value.value == ["ghost"]


def test_a_loop_without_budget_hits_the_step_limit() -> None:
    flow: Flow[dict] = Flow(start="a", nodes={"a": Counter("a")}, edges={"a": {DEFAULT_ACTION: "a"}}, max_steps=7)
    with pytest.raises(FlowError, match="step limit"):
        flow.run({})


def test_exec_is_retried_with_wait_then_succeeds() -> None:
    waits: list[float] = []
    node = Flaky(failures=2, max_retries=3, wait=1.5, sleep=waits.append)
    state: dict = {}
    node.run(state)
    assert state["result"] == "ok"
    assert node.calls == 3
    assert waits == [1.5, 1.5]


def test_fallback_gets_the_last_exception_when_retries_are_spent() -> None:
    node = Flaky(failures=5, fallback=True, max_retries=2, sleep=lambda s: None)
    state: dict = {}
    node.run(state)
    assert state["result"] == "fallback after failure 2"
    assert node.calls == 2


def test_default_fallback_reraises() -> None:
    node = Flaky(failures=1, max_retries=1)
    with pytest.raises(RuntimeError, match="failure 1"):
        node.run({})


def test_max_retries_below_one_is_refused() -> None:
    with pytest.raises(ValueError, match="max_retries"):
        Flaky(failures=0, max_retries=0)
