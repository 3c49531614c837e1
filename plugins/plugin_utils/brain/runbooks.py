"""Runbooks: Markdown files with YAML front matter saying what they match and what to do.

    ---
    id: nginx-stale-pid
    title: nginx died and left its pid file behind
    services: [nginx]                 # or ["*"] for any service
    match:
      failure_class: [stale_pidfile]  # any of these classes (service_check's failure_class)
      evidence:                       # every regex must match (case-insensitive) the named text
        status: "not running"
      reading: [missing_path]         # what the service's own error text says (reading.KINDS): the decisive
                                      # finding's kind is one of these
      query:                          # JMESPath expressions over the incident document (conditions.py), each
        - "evidence.pidfile.exists && !(evidence.pidfile.alive)"   # true as JMESPath counts truth
    vars:                             # placeholders filled from the incident document by JMESPath: a value that is
      pidfile_path: evidence.pidfile.path   # not text or a number, or is empty, makes the runbook not apply; a
                                      # projection (owners[*].pid) fills a step's argument that is its placeholder
                                      # alone, one argument per item found (kill -TERM {pids})
    evidence: [nginx -t]              # read-only commands diagnosis runs first (the guard must ALLOW them)
    investigate:                      # follow-up reads, run (think loop: plan -investigate-> observe -> plan) only
      - when: {journal: "CHDIR"}      # when every regex matches what the first evidence showed (names as in
        read: systemctl cat {unit}    # match.evidence); a read-only command the guard must ALLOW as a read
        why: the unit names the directory
    steps:                            # 1-3 commands; {placeholders} are filled from the incident
      - rm -f {stale_pidfile}
      - service {init_service} start
      # {run: ..., may_fail: true}: the plan goes on when it fails; {run: ..., optional: true}: left out when
      # a placeholder has no value for the incident (such as {unit} on a host without systemd)
    escalate: "..."                   # instead of steps: stop and hand over to a human with this text
    priority: 50                      # higher wins when several runbooks match; 0 or lower: a fallback,
                                      # tried only after the LLM (when one is configured)
    ---
    Why this happens and how an operator would fix it by hand.

Evidence names usable in ``match.evidence``: ``summary``, ``status``, ``log``, ``journal`` (the
unit's journal since its last start, on systemd hosts), ``port_owner``, or any command of the
runbook's ``evidence`` list (its output). Placeholders in steps and ``escalate``: {service}
{init_service} {unit} {pidfile} {stale_pidfile} {stale_socket} {stale_lock} {port} {port_owner_pid}
{port_owner_process}, and
in ``escalate`` also {cause} (the journal's line that names what went wrong) and {output:COMMAND}.

From the reading of the failure (reading.py): {missing_dir} {missing_dir_owner} {missing_dir_group}
{missing_dir_mode} when the path the service says is missing is (in) a directory of the service's own, with
the owner, group and mode it should have (as the host reads them, else as the policy's package_paths say its
package made it), and {missing_path} (that path) only when it is not;
{package_dir} {package_dir_owner} {package_dir_group} {package_dir_mode} for the package directory a
permission error names; in ``escalate`` also {reading} (the decisive error line and where it was read)
and {config_error} (the invalid configuration's lines, file, line and parameter). {known_good_file} and
{known_good_hash}: when the configuration error is explained by a file that changed since the service last
worked (the one the error names, or the only one changed) and the host kept its last known good copy, that file
and the copy's hash (none when the service's restore_known_good is off). A placeholder without
a value makes a step not applicable (the runbook is passed over), and so does a missing value of the
reading in ``escalate``; any other reads "(not known)" there.

A step ``service {init_service} VERB`` speaks the host's service manager: on a systemd host it runs
as ``systemctl VERB UNIT``, UNIT being the unit service_check found running the service (Debian's
``postgresql`` is a wrapper; ``postgresql@15-main`` runs the cluster), elsewhere as written.

This module is the format: a runbook, its parsing and the library of them; filling the placeholders is
placeholders.py's.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping

import yaml

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.conditions import Query, compile_query, incident_document, scalar_text
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.placeholders import (
    PLACEHOLDER,
    STEP_PLACEHOLDERS,
    TEXT_PLACEHOLDERS,
    NotApplicable,
    Value,
    render_step,
    render_text,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.reading import KINDS, NOTHING_READ, Reading
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import RunbookError
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure, Plan, PlanSource, Step
from ansible_collections.sentinel.heal.plugins.plugin_utils.yamlfile import YAML_LOADER, file_version

DEFAULT_RUNBOOK_DIR = Path(__file__).resolve().parents[3] / "runbooks"
MAX_STEPS = 3
_FRONT_MATTER = re.compile(r"\A---\s*\n(.*?)\n---\s*(?:\n|\Z)(.*)\Z", re.DOTALL)
_KEYS = frozenset({"id", "title", "services", "match", "evidence", "investigate", "steps", "escalate", "priority", "vars"})
_FOLLOW_UP_KEYS = frozenset({"when", "read", "why"})
_MATCH_KEYS = frozenset({"failure_class", "evidence", "reading", "query"})
_STEP_KEYS = frozenset({"run", "may_fail", "optional"})


@dataclass(frozen=True)
class RunbookStep:
    template: str
    may_fail: bool = False
    optional: bool = False


@dataclass(frozen=True)
class FollowUp:
    """A read a runbook wants once its first evidence showed something: a second look that decides the fix."""

    when: Mapping[str, re.Pattern[str]]
    read: str
    why: str


@dataclass(frozen=True)
class Runbook:
    id: str
    title: str
    path: str
    services: tuple[str, ...]
    failure_classes: tuple[str, ...]
    evidence_patterns: Mapping[str, re.Pattern[str]]
    evidence_commands: tuple[str, ...]
    readings: tuple[str, ...]
    steps: tuple[RunbookStep, ...]
    escalate: str | None
    priority: int
    body: str
    follow_ups: tuple[FollowUp, ...] = ()
    queries: tuple[Query, ...] = ()
    variables: Mapping[str, Query] = field(default_factory=dict)

    def serves(self, failure: Failure) -> bool:
        """Whether it is written for the failure's service."""
        return "*" in self.services or failure.service in self.services or failure.init_service in self.services

    def applies_to(self, failure: Failure) -> bool:
        """Whether the service and failure class fit (evidence is matched later, once gathered)."""
        return self.serves(failure) and (not self.failure_classes or failure.failure_class in self.failure_classes)

    def matches(self, failure: Failure, outputs: Mapping[str, str], reading: Reading = NOTHING_READ) -> bool:
        decisive = reading.decisive
        read_as_expected = not self.readings or (decisive is not None and decisive.kind in self.readings)
        if not (self.applies_to(failure) and read_as_expected and all(
                pattern.search(evidence_text(failure, name, outputs)) for name, pattern in self.evidence_patterns.items())):
            return False
        if not self.queries:
            return True
        document = incident_document(failure, outputs, reading)
        return all(query.holds(document) for query in self.queries)

    def variable_values(self, failure: Failure, outputs: Mapping[str, str], reading: Reading = NOTHING_READ) -> dict[str, Value]:
        """The values of the runbook's ``vars`` for the incident: only those that are text or a number and not empty,
        or, for a projection, a list of such (which fills a step's argument of its own, one argument each: every pid
        of a service)."""
        if not self.variables:
            return {}
        document = incident_document(failure, outputs, reading)
        values = {name: _value(query.search(document), query.projects) for name, query in self.variables.items()}
        return {name: value for name, value in values.items() if value is not None}

    @property
    def templates(self) -> tuple[str, ...]:
        return tuple(step.template for step in self.steps)

    def follow_up_reads(self, failure: Failure, outputs: Mapping[str, str], reading: Reading = NOTHING_READ) -> list[tuple[str, str]]:
        """The follow-up reads (command, why) whose condition holds on what was read so far; one whose placeholder has
        no value for this incident is left out."""
        reads = []
        variables = self.variable_values(failure, outputs, reading)
        for follow_up in self.follow_ups:
            if not all(pattern.search(evidence_text(failure, name, outputs)) for name, pattern in follow_up.when.items()):
                continue
            try:
                reads.append((render_step(follow_up.read, failure, reading=reading, extra=variables).command, follow_up.why))
            except NotApplicable:
                continue
        return reads

    @property
    def specificity(self) -> tuple[int, int, int]:
        conditions = len(self.evidence_patterns) + len(self.queries) + bool(self.failure_classes) + bool(self.readings)
        return (self.priority, conditions, "*" not in self.services)

    def render_steps(self, failure: Failure, reading: Reading = NOTHING_READ, outputs: Mapping[str, str] | None = None) -> tuple[Step, ...]:
        rendered = []
        variables = self.variable_values(failure, outputs or {}, reading)
        for step in self.steps:
            try:
                rendered.append(render_step(step.template, failure, step.may_fail, reading, extra=variables))
            except NotApplicable:
                if not step.optional:
                    raise
        return tuple(rendered)

    def render_escalation(self, failure: Failure, outputs: Mapping[str, str], reading: Reading = NOTHING_READ) -> str:
        return render_text(self.escalate or self.title, failure, outputs, reading, strict=True,
                           extra=self.variable_values(failure, outputs, reading), required=frozenset(self.variables))


def evidence_text(failure: Failure, name: str, outputs: Mapping[str, str]) -> str:
    evidence = failure.evidence
    if name == "summary":
        return failure.summary
    if name == "status":
        return str((evidence.get("status") or {}).get("output", ""))
    if name == "log":
        return "\n".join(str(tail) for tail in (evidence.get("logs") or {}).values())
    if name == "journal":
        return str((evidence.get("unit") or {}).get("journal") or "")
    if name == "port_owner":
        return "\n".join(f"{o.get('process', '')} {o.get('pid', '')} {o.get('cmdline', '')}" for o in evidence.get("port_owners") or [])
    return outputs.get(name, "")


def _value(found: Any, projects: bool) -> Value | None:
    """What a var's expression found as the value it fills: text, or the texts a projection found (None when empty or
    anything else)."""
    if projects and isinstance(found, list):
        items = tuple(scalar_text(item) for item in found)
        return None if not items or None in items else tuple(str(item) for item in items)
    return scalar_text(found)


class RunbookLibrary:
    def __init__(self, runbooks: Iterable[Runbook]) -> None:
        self.runbooks = tuple(sorted(runbooks, key=lambda rb: rb.id))

    @classmethod
    def load(cls, directories: Iterable[str | Path] = (), *, builtin: bool = True) -> RunbookLibrary:
        """Load the shipped runbooks (unless ``builtin`` is false) plus the user's; a user runbook
        replaces a shipped one with the same id."""
        by_id: dict[str, Runbook] = {}
        for directory in ((DEFAULT_RUNBOOK_DIR,) if builtin else ()) + tuple(directories):
            path = Path(directory).expanduser()
            if not path.is_dir():
                raise RunbookError("runbook directory not found", field="runbooks", value=str(path), hint="give an existing directory of .md files")
            for file in sorted(path.glob("*.md")):
                if file.name.lower() == "readme.md":
                    continue
                runbook = _parse_runbook_file(*file_version(file))
                by_id[runbook.id] = runbook
        return cls(by_id.values())

    def candidates(self, failure: Failure) -> list[Runbook]:
        return [rb for rb in self.runbooks if rb.applies_to(failure)]

    def planned_by(self, plan: Plan) -> Runbook | None:
        """The runbook a plan (a remembered one, replayed any number of times) was first planned from, if it is loaded."""
        kind, _space, reference = plan.first_planned_by.partition(" ")
        return next((rb for rb in self.runbooks if rb.id == reference), None) if kind == PlanSource.RUNBOOK.value else None


@lru_cache(maxsize=1024)
def _parse_runbook_file(path: str, _mtime_ns: int, _size: int) -> Runbook:
    """A runbook file parsed once per process while it is unchanged (runbooks are immutable): every heal session loads
    the library, and the forks of a play inherit what their parent parsed."""
    return parse_runbook(Path(path).read_text(encoding="utf-8"), path)


def parse_runbook(text: str, path: str) -> Runbook:
    found = _FRONT_MATTER.match(text)
    if not found:
        raise RunbookError(
            f"{path}: no YAML front matter", field="front matter", value=text[:40], hint="start the file with --- and a YAML block, then ---",
        )
    try:
        meta = yaml.load(found.group(1), Loader=YAML_LOADER)
    except yaml.YAMLError as exc:
        raise RunbookError(f"{path}: front matter is not valid YAML", field="front matter", value=path, hint=str(exc)) from exc
    if not isinstance(meta, dict):
        raise RunbookError(f"{path}: front matter must be a mapping", field="front matter", value=meta)
    unknown = sorted(set(meta) - _KEYS)
    if unknown:
        raise RunbookError(f"{path}: unknown key", field=unknown[0], value=meta[unknown[0]], hint=f"known keys: {sorted(_KEYS)}")
    runbook_id = _required_str(meta, "id", path)
    match = meta.get("match") or {}
    if not isinstance(match, dict) or set(match) - _MATCH_KEYS:
        raise RunbookError(f"{path}: 'match' takes failure_class, evidence and reading", field="match", value=match)
    readings = tuple(_str_list(match, "reading", path))
    queries = tuple(compile_query(text, field=f"match.query[{index}]", where=path, error=RunbookError)
                    for index, text in enumerate(_one_or_more(match, "query", path)))
    variables = _parse_variables(path, meta.get("vars") or {})
    unknown_kinds = sorted(set(readings) - set(KINDS))
    if unknown_kinds:
        raise RunbookError(f"{path}: unknown kind of reading", field="match.reading", value=unknown_kinds[0], hint=f"known: {list(KINDS)}")
    steps = tuple(_parse_step(path, i, raw, names=frozenset(variables)) for i, raw in enumerate(meta.get("steps") or []))
    escalate = meta.get("escalate")
    if bool(steps) == bool(escalate):
        raise RunbookError(f"{path}: give either steps or escalate", field="steps", value=list(meta.get("steps") or []))
    if len(steps) > MAX_STEPS:
        raise RunbookError(f"{path}: at most {MAX_STEPS} steps", field="steps", value=len(steps))
    priority = meta.get("priority", 0)
    if not isinstance(priority, int):
        raise RunbookError(f"{path}: priority must be a whole number", field="priority", value=priority)
    return Runbook(
        id=runbook_id,
        title=_required_str(meta, "title", path),
        path=path,
        services=tuple(str(s) for s in _str_list(meta, "services", path, required=True)),
        failure_classes=tuple(_str_list(match, "failure_class", path)),
        evidence_patterns={name: _compile(path, name, pattern) for name, pattern in (match.get("evidence") or {}).items()},
        evidence_commands=tuple(_str_list(meta, "evidence", path)),
        readings=readings,
        steps=steps,
        escalate=str(escalate) if escalate else None,
        priority=priority,
        body=found.group(2).strip(),
        follow_ups=tuple(_parse_follow_up(path, index, raw, frozenset(variables)) for index, raw in enumerate(_list(meta, "investigate", path))),
        queries=queries,
        variables=variables,
    )


def _one_or_more(meta: Mapping[str, Any], key: str, path: str) -> list[Any]:
    value = meta.get(key)
    return [] if value is None else value if isinstance(value, list) else [value]


def _parse_variables(path: str, raw: Any) -> dict[str, Query]:
    if not isinstance(raw, dict):
        raise RunbookError(f"{path}: 'vars' maps placeholder names to JMESPath expressions", field="vars", value=raw)
    variables = {}
    for name, text in raw.items():
        if not isinstance(name, str) or not re.fullmatch(r"[a-z_]+", name) or name in STEP_PLACEHOLDERS | TEXT_PLACEHOLDERS | {"output", "cause"}:
            raise RunbookError(f"{path}: a var's name is a new placeholder of lowercase letters and _", field=f"vars.{name}", value=name,
                               hint=f"not one of the incident's own: {sorted(STEP_PLACEHOLDERS)}")
        variables[name] = compile_query(text, field=f"vars.{name}", where=path, error=RunbookError)
    return variables


def _list(meta: Mapping[str, Any], key: str, path: str) -> list[Any]:
    value = meta.get(key) or []
    if not isinstance(value, list):
        raise RunbookError(f"{path}: '{key}' must be a list", field=key, value=value)
    return value


def _parse_follow_up(path: str, index: int, raw: Any, names: frozenset[str] = frozenset()) -> FollowUp:
    where = f"investigate[{index}]"
    if not isinstance(raw, dict) or set(raw) - _FOLLOW_UP_KEYS or not {"when", "read"} <= set(raw):
        raise RunbookError(f"{path}: a follow-up read is {{when: {{EVIDENCE: REGEX, ...}}, read: COMMAND, why: TEXT}}", field=where, value=raw)
    when = raw["when"]
    if not isinstance(when, dict) or not when:
        raise RunbookError(f"{path}: 'when' maps evidence names to regexes", field=f"{where}.when", value=when)
    read = _parse_step(path, index, raw["read"], f"{where}.read", names).template
    return FollowUp(when={name: _compile(path, name, pattern, f"{where}.when") for name, pattern in when.items()}, read=read,
                    why=str(raw.get("why") or ""))


def _parse_step(path: str, index: int, raw: Any, where: str = "", names: frozenset[str] = frozenset()) -> RunbookStep:
    where = where or f"steps[{index}]"
    if isinstance(raw, dict) and set(raw) - _STEP_KEYS:
        unknown = sorted(set(raw) - _STEP_KEYS)[0]
        raise RunbookError(f"{path}: unknown key of a step", field=f"{where}.{unknown}", value=raw[unknown],
                           hint=f"known keys: {sorted(_STEP_KEYS)}")
    template = raw.get("run") if isinstance(raw, dict) else raw
    if not isinstance(template, str) or not template.strip():
        raise RunbookError(f"{path}: a step is a command string or {{run: ..., may_fail: true, optional: true}}", field=where,
                           value=raw)
    for name, _argument in PLACEHOLDER.findall(template):
        if name not in STEP_PLACEHOLDERS | names:
            raise RunbookError(f"{path}: unknown placeholder", field=where, value=template, hint=f"known: {sorted(STEP_PLACEHOLDERS | names)}")
    try:
        shlex.split(template)
    except ValueError as exc:
        raise RunbookError(f"{path}: step cannot be split into arguments", field=where, value=template, hint=str(exc)) from exc
    if not isinstance(raw, dict):
        return RunbookStep(template)
    return RunbookStep(template, may_fail=bool(raw.get("may_fail", False)), optional=bool(raw.get("optional", False)))


def _compile(path: str, name: str, pattern: Any, where: str = "match.evidence") -> re.Pattern[str]:
    try:
        return re.compile(str(pattern), re.IGNORECASE | re.MULTILINE)
    except re.error as exc:
        raise RunbookError(f"{path}: invalid regular expression", field=f"{where}.{name}", value=pattern, hint=str(exc)) from exc


def _required_str(meta: Mapping[str, Any], key: str, path: str) -> str:
    value = meta.get(key)
    if not isinstance(value, str) or not value.strip():
        raise RunbookError(f"{path}: '{key}' is required text", field=key, value=value)
    return value


def _str_list(meta: Mapping[str, Any], key: str, path: str, required: bool = False) -> list[str]:
    value = meta.get(key)
    if value is None and not required:
        return []
    if not isinstance(value, list) or not value or not all(isinstance(v, str) for v in value):
        raise RunbookError(f"{path}: '{key}' must be a non-empty list of strings", field=key, value=value)
    return value
