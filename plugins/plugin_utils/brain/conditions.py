"""Structured conditions with JMESPath: a runbook's ``match.query`` and ``vars`` over one document of the incident.

The incident document (what every expression reads)::

    host, service, init_service, unit       the failed service on its host (unit: null without systemd)
    failure_class, summary, cause           service_check's class and summary; the journal's line naming the cause
    evidence                                service_check's structured evidence: status, logs, port_owners,
                                            pidfile, paths, sockets, disk, processes, unit (systemd), ...
    spec                                    the service as the inventory declares it (ports, paths, user, ...)
    facts                                   the host's facts service_check gathered (os_family, service_mgr, ...)
    outputs                                 the output of each of the runbook's evidence commands, by command
    reading                                 the decisive finding of the service's own error text:
                                            {kind, lines, source, path, place} (null when nothing was read)
    cause_gone                              what says that the cause an earlier run reported for this failure is
                                            gone now (its facts of trouble no longer hold: a person fixed it between
                                            the runs), or null

Derived views, for what a filter cannot say (JMESPath has no reference to the document's root inside a filter, so an
owner cannot be compared with ``spec.user`` there), each a list, empty when nothing is found::

    foreign_port_owners                     the port owners that are not the service's own process ({process, pid, ...})
    lost_port_owners                        the port owners that run the service's own program outside every unit and
                                            outside the service's known processes (its master gone: a killed nginx's
                                            workers), never another declared service's ({process, pid, ...})
    missing_paths                           what is missing: the path the service says is missing (its decisive
                                            line), then each declared path that does not exist (but none systemd
                                            makes at the unit's start: RuntimeDirectory= ...): {path, source,
                                            package_dir}
    misowned_paths                          what has the wrong owner or mode: the path of the service's permission
                                            error (its decisive line), then each declared path owned by another
                                            account than the package gave it (when it is a package's directory; else
                                            than spec.user), then each declared log another account owns in a
                                            directory the package owns whole: {path, source, owner, group, mode,
                                            package_dir}
    full_log_filesystems                    each declared log whose directory's filesystem is full or out of inodes:
                                            {log, directory, full, inodes_exhausted, used_percent, inodes_percent,
                                            package_dir}

``package_dir`` is the directory of the service's own that the path is (in), with the owner, group and mode it should
have: ``{path, owner, group, mode, tree, source}`` (``tree``: what lies below has the same owner and group), or null
outside them. The host's reading comes first (service_check's ``owned_dirs``: the unit's ``RuntimeDirectory=`` and the
others, dpkg-statoverride, what the directory was while the service was healthy), the policy's ``package_paths`` where
the host says nothing; ``source`` says which, in words a person reads (``unit RuntimeDirectory=``, ``dpkg-statoverride``,
``seen while healthy at 2025-05-01T10:00:00Z``, ``the policy's package_paths``).

Expressions are compiled once, when the runbook is loaded; a syntax error, an unknown function or a function given
the wrong number of arguments fails the load. An expression that meets a value of the wrong type while it is
evaluated (``length(evidence.disk)`` where ``disk`` is an object) answers nothing: the condition does not hold.
"""

from __future__ import annotations

import functools
import posixpath
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from ansible_collections.sentinel.heal.plugins.module_utils._guard.context import unit_directories
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.reading import NOTHING_READ, PackageDir, Reading
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure

# jmespath is imported where an expression is compiled or searched, as the controller's other libraries are: loading
# the plugins needs only ansible-core's own (what ansible-test's import sanity test gives them)
if TYPE_CHECKING:
    from jmespath.parser import ParsedResult


@functools.cache
def _functions() -> Mapping[str, Any]:
    from jmespath.functions import Functions

    return dict(Functions().FUNCTION_TABLE)


@dataclass(frozen=True)
class Query:
    """One compiled JMESPath expression and the text it was written as."""

    text: str
    compiled: ParsedResult

    def search(self, document: Mapping[str, Any]) -> Any:
        """The expression's value over the document; None when it met a value of the wrong type."""
        from jmespath.exceptions import JMESPathError

        try:
            return self.compiled.search(document)
        except JMESPathError:
            return None

    @property
    def projects(self) -> bool:
        """Whether the expression is a projection (``owners[*].pid``, ``owners[?root].pid``, ``owners[]``): a list by
        design, never a value that happened to be one."""
        return _projects(self.compiled.parsed)

    def holds(self, document: Mapping[str, Any]) -> bool:
        """Whether the value is true as JMESPath counts truth."""
        return jmespath_true(self.search(document))


_PROJECTIONS = frozenset({"projection", "value_projection", "filter_projection", "flatten"})


def _projects(node: Mapping[str, Any]) -> bool:
    kind, children = node.get("type"), node.get("children") or []
    if kind == "subexpression":  # evidence.owners[*].pid: the projection is the right-hand part
        return any(_projects(child) for child in children)
    if kind == "pipe":  # owners[*].pid | [0]: what the last part makes of it
        return _projects(children[-1])
    return kind in _PROJECTIONS


def jmespath_true(value: Any) -> bool:
    """JMESPath's truth: null, false and empty text, lists and objects are false; every number is true, 0 too."""
    if value is None or value is False:
        return False
    return len(value) > 0 if isinstance(value, (str, list, dict)) else True


def compile_query(text: Any, *, field: str, where: str = "", error: type[ConfigError] = ConfigError) -> Query:
    """Compile once; an ``error`` names ``field``, the expression and jmespath's own message (``where``: the file)."""
    import jmespath
    from jmespath.exceptions import JMESPathError

    prefix = f"{where}: " if where else ""
    if not isinstance(text, str) or not text.strip():
        raise error(f"{prefix}a JMESPath expression is required text", field=field, value=text)
    try:
        compiled = jmespath.compile(text)
    except JMESPathError as exc:
        raise error(f"{prefix}invalid JMESPath expression", field=field, value=text, hint=" ".join(str(exc).split())) from exc
    problem = _function_problem(compiled.parsed)
    if problem is not None:
        raise error(f"{prefix}invalid JMESPath expression", field=field, value=text, hint=problem)
    return Query(text=text, compiled=compiled)


def _function_problem(node: Any) -> str | None:
    """What jmespath would only say when evaluating: an unknown function, or one called with the wrong arity."""
    if not isinstance(node, dict):
        return None
    if node.get("type") == "function_expression":
        name, arguments = node["value"], node.get("children") or []
        if name not in _functions():
            return f"unknown function: {name}()"
        signature = _functions()[name]["signature"]
        variadic = bool(signature) and bool(signature[-1].get("variadic"))
        if len(arguments) < len(signature) or (not variadic and len(arguments) > len(signature)):
            return f"{name}() takes {'at least ' if variadic else ''}{len(signature)} argument(s), got {len(arguments)}"
    children = node.get("children") or []
    return next((problem for child in children if (problem := _function_problem(child)) is not None), None)


def incident_document(failure: Failure, outputs: Mapping[str, str], reading: Reading = NOTHING_READ) -> dict[str, Any]:
    """The one document a runbook's expressions read (see the module's documentation for its fields)."""
    decisive = reading.decisive
    own = {str(failure.spec.get("process") or ""), failure.service, failure.init_service} - {""}
    return {
        "host": failure.host, "service": failure.service, "init_service": failure.init_service, "unit": failure.unit,
        "failure_class": failure.failure_class, "summary": failure.summary, "cause": failure.cause, "cause_gone": reading.cause_gone,
        "evidence": dict(failure.evidence), "spec": dict(failure.spec), "facts": dict(failure.facts), "outputs": dict(outputs),
        "reading": None if decisive is None else {"kind": decisive.kind, "lines": list(decisive.lines), "source": decisive.source,
                                                  "path": decisive.path, "place": decisive.place},
        "foreign_port_owners": [dict(owner) for owner in failure.evidence.get("port_owners") or []
                                if owner.get("process") not in own and not owner.get("own")],
        "lost_port_owners": [dict(owner) for owner in failure.evidence.get("port_owners") or [] if _lost(owner, failure.evidence)],
        "missing_paths": _missing_paths(failure, reading),
        "misowned_paths": _misowned_paths(failure, reading),
        "full_log_filesystems": _full_log_filesystems(failure, reading),
    }


def _lost(owner: Mapping[str, Any], evidence: Mapping[str, Any]) -> bool:
    """The host's judge counts such a port owner among the service's own processes (lost_pids) as well."""
    other_unit = str(owner.get("unit") or "").endswith(".service")
    return bool(owner.get("service_program")) and not owner.get("own") and not owner.get("service") and not other_unit \
        and owner.get("pid") not in (evidence.get("service_pids") or [])


def _package_dir(directory: PackageDir | None) -> dict[str, Any] | None:
    return None if directory is None else {"path": directory.path, "owner": directory.owner, "group": directory.group, "mode": directory.mode,
                                           "tree": directory.tree, "source": directory.source}


def _decisive_path(reading: Reading, kind: str) -> list[dict[str, Any]]:
    """The path the service's decisive line names, when that line is of this kind."""
    decisive = reading.decisive
    if decisive is None or decisive.kind != kind or not decisive.path:
        return []
    return [{"path": decisive.path, "source": decisive.source, "package_dir": _package_dir(decisive.package_dir)}]


def _missing_paths(failure: Failure, reading: Reading) -> list[dict[str, Any]]:
    # systemd makes them at the unit's start (and removes a RuntimeDirectory= when it stops): not missing while it is stopped
    made_at_start = unit_directories(failure.evidence.get("unit") or {})
    declared = [{"path": info["path"], "source": "service_check", "package_dir": _package_dir(reading.package_dirs.get(info["path"]))}
                for info in _declared_paths(failure) if info.get("exists") is False and _without_var_run(info["path"]) not in made_at_start]
    return _decisive_path(reading, "missing_path") + declared


def _declared_paths(failure: Failure) -> list[Mapping[str, Any]]:
    """service_check's entries of the declared paths (each names its path)."""
    return [info for info in failure.evidence.get("paths") or [] if isinstance(info, Mapping) and isinstance(info.get("path"), str)]


def _without_var_run(path: str) -> str:
    return "/run" + path[len("/var/run"):] if path == "/var/run" or path.startswith("/var/run/") else path


def _misowned_paths(failure: Failure, reading: Reading) -> list[dict[str, Any]]:
    said = [{**found, "owner": None, "group": None, "mode": None} for found in _decisive_path(reading, "permission")]
    declared = []
    for info in _declared_paths(failure):
        located = reading.package_dirs.get(info["path"])
        # a path below a package's directory may rightly belong to someone else, and what it should be is not known:
        # only a package's directory itself is compared with the package's owner (and given back by a class)
        itself = located if located is not None and located.path == info["path"] else None
        expected = itself.owner if itself is not None else failure.spec.get("user")
        if info.get("exists") and expected and info.get("owner") != expected:
            declared.append({"path": info["path"], "source": "service_check", "owner": info.get("owner"), "group": info.get("group"),
                             "mode": info.get("mode"), "package_dir": _package_dir(itself)})
    return said + declared + _misowned_logs(failure, reading)


def _misowned_logs(failure: Failure, reading: Reading) -> list[dict[str, Any]]:
    """The declared logs, in a directory whose whole tree the package gives one owner, that service_check saw owned by
    another account (its path_owners; a link is no log of the service's): a service that cannot open its log may
    have no other place to say so (redis started by a sysv script)."""
    owners = failure.evidence.get("path_owners") or {}
    found = []
    for log in failure.spec.get("logs") or []:
        directory = reading.package_dirs.get(posixpath.dirname(str(log)))
        owner = owners.get(str(log))
        if directory is not None and directory.tree and owner not in (None, "(link)", directory.owner):
            found.append({"path": str(log), "source": "service_check", "owner": owner, "group": None, "mode": None,
                          "package_dir": _package_dir(directory)})
    return found


def _full_log_filesystems(failure: Failure, reading: Reading) -> list[dict[str, Any]]:
    usage = {str(disk.get("path")): disk for disk in failure.evidence.get("disk") or [] if isinstance(disk, Mapping)}
    found = []
    for log in failure.spec.get("logs") or []:
        directory = posixpath.dirname(str(log))
        disk = usage.get(directory) or {}
        if disk.get("full") or disk.get("inodes_exhausted"):
            found.append({"log": str(log), "directory": directory, "full": bool(disk.get("full")),
                          "inodes_exhausted": bool(disk.get("inodes_exhausted")), "used_percent": disk.get("used_percent"),
                          "inodes_percent": disk.get("inodes_percent"), "package_dir": _package_dir(reading.package_dirs.get(directory))})
    return found


def scalar_text(value: Any) -> str | None:
    """A value as the one argument or phrase it fills: text or a number, never empty; None for anything else (null, a
    boolean, a list, an object)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    text = str(value)
    return text if text.strip() else None
