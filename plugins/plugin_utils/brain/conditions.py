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

Expressions are compiled once, when the runbook is loaded; a syntax error, an unknown function or a function given
the wrong number of arguments fails the load. An expression that meets a value of the wrong type while it is
evaluated (``length(evidence.disk)`` where ``disk`` is an object) answers nothing: the condition does not hold.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any, Mapping

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.reading import NOTHING_READ, Reading
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

    def holds(self, document: Mapping[str, Any]) -> bool:
        """Whether the value is true as JMESPath counts truth."""
        return jmespath_true(self.search(document))


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
    return {
        "host": failure.host, "service": failure.service, "init_service": failure.init_service, "unit": failure.unit,
        "failure_class": failure.failure_class, "summary": failure.summary, "cause": failure.cause,
        "evidence": dict(failure.evidence), "spec": dict(failure.spec), "facts": dict(failure.facts), "outputs": dict(outputs),
        "reading": None if decisive is None else {"kind": decisive.kind, "lines": list(decisive.lines), "source": decisive.source,
                                                  "path": decisive.path, "place": decisive.place},
    }


def scalar_text(value: Any) -> str | None:
    """A value as the one argument or phrase it fills: text or a number, never empty; None for anything else (null, a
    boolean, a list, an object)."""
    if isinstance(value, bool) or not isinstance(value, (str, int, float)):
        return None
    text = str(value)
    return text if text.strip() else None
