"""The collection's modules import one way: no circle through any of them, read from their source (every import,
including those inside functions), so that a new one fails here before it makes an import order matter."""

from __future__ import annotations

import ast
from pathlib import Path

PLUGINS = Path(__file__).resolve().parents[3] / "plugins"
PREFIX = "ansible_collections.sentinel.heal.plugins."


def _module_names() -> dict[str, Path]:
    names = {}
    for path in PLUGINS.rglob("*.py"):
        parts = path.relative_to(PLUGINS).with_suffix("").parts
        names[".".join(parts[:-1] if parts[-1] == "__init__" else parts)] = path
    return names


def _imports(name: str, path: Path, known: dict[str, Path]) -> set[str]:
    """The collection's modules that ``name`` imports (``from PACKAGE import MODULE`` names the module)."""
    package = name.split(".") if path.name == "__init__.py" else name.split(".")[:-1]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.ImportFrom):
            if node.level:
                base = package[:len(package) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            elif node.module and node.module.startswith(PREFIX):
                target = node.module.removeprefix(PREFIX)
            else:
                continue
            found |= {candidate for candidate in [target, *(f"{target}.{alias.name}" for alias in node.names)] if candidate in known}
        elif isinstance(node, ast.Import):
            found |= {alias.name.removeprefix(PREFIX) for alias in node.names if alias.name.removeprefix(PREFIX) in known}
    return found - {name}


def import_graph() -> dict[str, set[str]]:
    known = _module_names()
    return {name: _imports(name, path, known) for name, path in known.items()}


def circles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan's algorithm, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    found: list[list[str]] = []
    for root in sorted(graph):
        if root in index:
            continue
        work = [(root, iter(sorted(graph[root])))]
        index[root] = low[root] = len(index)
        stack.append(root)
        on_stack.add(root)
        while work:
            node, edges = work[-1]
            following = next(edges, None)
            if following is None:
                work.pop()
                if work:
                    low[work[-1][0]] = min(low[work[-1][0]], low[node])
                if low[node] == index[node]:
                    component = []
                    while True:
                        member = stack.pop()
                        on_stack.discard(member)
                        component.append(member)
                        if member == node:
                            break
                    if len(component) > 1:
                        found.append(sorted(component))
            elif following not in index:
                index[following] = low[following] = len(index)
                stack.append(following)
                on_stack.add(following)
                work.append((following, iter(sorted(graph[following]))))
            elif following in on_stack:
                low[node] = min(low[node], index[following])
    return found


def test_no_module_of_the_collection_imports_itself_back_through_others() -> None:
    graph = import_graph()
    assert graph["plugin_utils.store.sqlite"] >= {"plugin_utils.store.database", "plugin_utils.errors"}  # it reads imports
    assert circles(graph) == []


def test_a_circle_is_found_however_long() -> None:
    assert circles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert circles({"a": {"b"}, "b": set(), "c": {"c"}}) == []


def test_an_action_plugin_adapts_its_task_in_a_few_lines_and_imports_no_other_action() -> None:
    """One way into the loop: what a task does lives in plugin_utils/tasks/, so an action is the Ansible name of it."""
    graph = import_graph()
    actions = sorted((PLUGINS / "action").glob("*.py"))
    assert len(actions) > 10
    too_long = {path.name: lines for path in actions if (lines := len(path.read_text().splitlines())) > 40}
    assert too_long == {}
    assert {name: sorted(dependency for dependency in graph[name] if dependency.startswith("action."))
            for name in graph if name.startswith("action.")} == {f"action.{path.stem}": [] for path in actions}


def test_the_store_imports_only_the_data_it_keeps_never_what_runs_or_decides() -> None:
    """Data goes one way, from the loop into the memory: the store never reads a runner's artifacts, a plan's policy or
    a model's answer itself (what a killed run had started reaches it as a function of the caller's, fleet/leases.py),
    nor the fleet's coordination (leases, canaries, silences, the kill switch, fleet incidents, alerts): fleet/ keeps
    its own tables over the store's Database port."""
    graph = import_graph()
    outside = {dependency for module, dependencies in graph.items() if module.startswith("plugin_utils.store.")
               for dependency in dependencies if not dependency.startswith("plugin_utils.store.")}
    assert outside == {"plugin_utils.errors", "plugin_utils.incident"}


def test_no_module_of_the_store_imports_the_fleet() -> None:
    graph = import_graph()
    assert any(dependency.startswith("plugin_utils.store.") for dependency in graph["plugin_utils.fleet.leases"])  # fleet -> store
    assert {module: sorted(dependency for dependency in dependencies if dependency.startswith("plugin_utils.fleet"))
            for module, dependencies in graph.items() if module.startswith("plugin_utils.store")} == {
        module: [] for module in graph if module.startswith("plugin_utils.store")}
