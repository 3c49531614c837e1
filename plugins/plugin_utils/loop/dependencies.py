"""Dependencies first, on a host: when a failing service needs another declared service that fails too, the incident
is the dependency's. It is healed first; the service that needs it is checked again before anything is planned for it
(it may answer again once its dependency does), and is never healed blindly while its dependency stays down.

A service needs another when it says so (``depends_on``), when its systemd unit ``Requires=``, ``BindsTo=`` or is ordered
``After=`` the other's unit, or when its configuration names a port on the host's loopback that the other declares (a
proxy's backend: haproxy's ``server web 127.0.0.1:8081`` in front of apache2 on 8081, which no unit says).
"""

from __future__ import annotations

from typing import Any, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError, HostUnreachable
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure, Status
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.graph import ToolNode
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import DependencyOutcome, IncidentState

# the unit properties by which systemd says a unit needs another (or starts after it)
SYSTEMD_NEEDS = ("Requires", "BindsTo", "After")
# a dependency that ended so back: the service that needs it is checked again
BACK = frozenset({Status.HEALED.value, Status.RECOVERED.value})
# a dependency that ended so needs a person: so does the service that needs it (the page names the dependency's cause)
STUCK = frozenset({Status.ESCALATED.value, Status.UNREACHABLE.value, Status.MASKED.value})


def check_depends_on(services: Sequence[Mapping[str, Any]]) -> None:
    """Every ``depends_on`` names another service the host declares."""
    declared = {spec["name"] for spec in services}
    for index, spec in enumerate(services):
        for needed in spec.get("depends_on") or []:
            if needed not in declared or needed == spec["name"]:
                raise ConfigError(f"{spec['name']} depends on a service the host does not declare", field=f"services[{index}].depends_on",
                                  value=needed, hint=f"name another service of autoheal_services: {', '.join(sorted(declared - {spec['name']}))}")


def with_what_they_need(services: Sequence[Mapping[str, Any]], names: Sequence[str]) -> list[Mapping[str, Any]]:
    """The services ``names`` names, and those they need (``depends_on``, transitively), in their declared order; all
    of them when ``names`` is empty."""
    declared = {spec["name"]: spec for spec in services}
    unknown = [name for name in names if name not in declared]
    if unknown:
        raise ConfigError("target_services names a service the host does not declare", field="target_services", value=unknown[0],
                          hint=f"declare it, or name only declared services: {', '.join(declared)}")
    wanted, pending = set(names), list(names)
    while pending:
        for needed in declared[pending.pop()].get("depends_on") or []:
            if needed not in wanted:
                wanted.add(needed)
                pending.append(needed)
    return [spec for spec in services if not names or spec["name"] in wanted]


def dependencies_first(failures: Sequence[Failure]) -> list[tuple[Failure, tuple[str, ...]]]:
    """The failures in the order they are healed - each after the failing services it needs - each with those services
    (in the order they are healed). A cycle is cut where it closes: the service met first is healed first."""
    by_name = {failure.service: failure for failure in failures}
    needs = {failure.service: [other for other in by_name if other != failure.service and _needs(failure, by_name[other])] for failure in failures}
    ordered: list[str] = []
    visiting: set[str] = set()

    def visit(name: str) -> None:
        if name in ordered or name in visiting:
            return
        visiting.add(name)
        for other in needs[name]:
            visit(other)
        visiting.discard(name)
        ordered.append(name)

    for failure in failures:
        visit(failure.service)
    position = {name: index for index, name in enumerate(ordered)}
    return [(by_name[name], tuple(other for other in needs[name] if position[other] < position[name])) for name in ordered]


def _needs(failure: Failure, other: Failure) -> bool:
    if other.service in (failure.spec.get("depends_on") or ()):
        return True
    if set(failure.evidence.get("backends") or ()) & set(other.spec.get("ports") or ()):
        return True
    unit = failure.evidence.get("unit") or {}
    needed = {name for key in SYSTEMD_NEEDS for name in str(unit.get(key) or "").split()}
    return bool(needed & _unit_names(other))


def _unit_names(failure: Failure) -> set[str]:
    unit = failure.evidence.get("unit") or {}
    names = {f"{failure.init_service}.service"}
    for found in (unit, unit.get("Wrapper") or {}):
        if found.get("Id"):
            names.add(str(found["Id"]))
    return names


class AwaitDependenciesNode(ToolNode):
    """The service needs others that failed in this run, healed before it: when every one is back, check the service
    again (it may answer now: nothing runs for it); when one needs a person, so does this one; otherwise it waits
    for the next run. Diagnose comes here once, after a person's decisions (a silence, a masked unit) were heard."""

    node_name = "dependencies"

    def prep(self, state: IncidentState) -> tuple[tuple[DependencyOutcome, ...], Mapping[str, Any]]:
        return state.dependencies, state.failure.spec

    def exec(self, prep_res: tuple[tuple[DependencyOutcome, ...], Mapping[str, Any]]) -> Mapping[str, Any] | HostUnreachable | None:
        dependencies, spec = prep_res
        if not all(dependency.status in BACK for dependency in dependencies):
            return None
        try:
            return self.tools.verify(spec)
        except HostUnreachable as exc:
            return exc

    def post(self, state: IncidentState, prep_res: tuple[tuple[DependencyOutcome, ...], Mapping[str, Any]],
             exec_res: Mapping[str, Any] | HostUnreachable | None) -> str:
        state.awaited_dependencies = True
        service, (dependencies, _spec) = state.failure.service, prep_res
        chain = ", ".join(f"{dependency.service} ({dependency.status})" for dependency in dependencies)
        if exec_res is None:
            stuck = [dependency for dependency in dependencies if dependency.status in STUCK]
            waiting = stuck or [dependency for dependency in dependencies if dependency.status not in BACK]
            first = waiting[0]
            state.reason = f"{service} needs {first.service}, which is {first.status.replace('_', ' ')}: {first.reason}"
            state.log(self.name, f"needs {chain}: nothing runs for {service} while {first.service} is not back")
            return "escalate" if stuck else "deferred"
        if isinstance(exec_res, HostUnreachable):
            state.reason = f"{service}: the host stopped answering after its dependencies were healed: {exec_res}"
            return "unreachable"
        if exec_res.get("healthy"):
            state.reason = f"{service} answers again since what it needs was healed first: {chain}; nothing ran for {service}"
            state.log(self.name, state.reason)
            return "recovered"
        state.failure = Failure.from_check(state.failure.host, exec_res, state.failure.facts)
        state.log(self.name, f"still failing once what it needs was healed ({chain}): {state.failure.failure_class}: {state.failure.summary}")
        return "failing"
