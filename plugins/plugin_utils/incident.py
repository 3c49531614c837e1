"""The types one incident is made of: failure, plan, verdict, step result, attempt.

One room over 400 lines: it is the vocabulary every other room speaks (loop, brain, guard, store, report), and what a
failure says of itself (its restores, what changed, how both read to a person) belongs with the failure."""

from __future__ import annotations

import fnmatch
import hashlib
import posixpath
import re
import shlex
from dataclasses import asdict, dataclass, field
from enum import StrEnum
from typing import Any, Iterable, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.module_utils._guard.context import running_unit
from ansible_collections.sentinel.heal.plugins.module_utils._guard.judge import Decision, Verdict
from ansible_collections.sentinel.heal.plugins.module_utils._text import moment
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError

__all__ = ["Attempt", "Decision", "Failure", "Hold", "PendingPlan", "Plan", "PlanSource", "Status", "Step", "StepResult", "Verdict",
           "host_family", "normalize_error_text"]


class Status(StrEnum):
    """The end state of a host (and of each incident on it), worst last."""

    HEALTHY = "healthy"
    MASKED = "masked"  # a person masked the unit: left alone, nothing run
    SILENCED = "silenced"  # a person's silence covers it: checked, nothing planned or run
    RECOVERED = "recovered"  # systemd's own Restart= brought it back while the loop waited: nothing run
    HEALED = "healed"
    PLANNED = "planned"  # check mode only: the plan would run unattended
    OBSERVED = "observed"  # observe mode: the plan it would have run; nothing ran or waits
    SUSPENDED = "suspended"  # the kill switch was thrown: the remediation did not start
    DEFERRED = "deferred"  # the blast radius was spent, or a new plan failed on its canary: the remediation did not start
    HALTED = "halted"  # more than max_fail_percentage of the run's hosts failed verification: nothing more ran in the run
    IN_PROGRESS_ELSEWHERE = "in_progress_elsewhere"  # another run is remediating the same service on the host
    AWAITING_APPROVAL = "awaiting_approval"
    ESCALATED = "escalated"
    UNREACHABLE = "unreachable"

    @classmethod
    def worst(cls, statuses: list[Status]) -> Status:
        order = list(cls)
        return max(statuses, key=order.index, default=cls.HEALTHY)


class PlanSource(StrEnum):
    """Where a plan came from, in order of trust."""

    MEMORY = "memory"
    RUNBOOK = "runbook"
    LLM = "llm"
    GENERIC = "generic"


# Order matters: timestamps before numbers, paths before the numbers inside them.
_ABSTRACTIONS = (
    (re.compile(r"\b\d{4}[-/]\d{2}[-/]\d{2}[ T]\d{2}:\d{2}:\d{2}(?:[.,]\d+)?(?:Z|[+-]\d{2}:?\d{2}| UTC)?"), "<ts>"),
    (re.compile(r"\b(?:Jan|Feb|Mar|Apr|May|Jun|Jul|Aug|Sep|Oct|Nov|Dec) +\d{1,2} \d{2}:\d{2}:\d{2}\b"), "<ts>"),
    (re.compile(r"\b[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}\b", re.IGNORECASE), "<uuid>"),
    (re.compile(r"(?<![\w.])(?:/[\w.@+-]+)+/?"), "<path>"),
    (re.compile(r"\b\d{1,3}(?:\.\d{1,3}){3}(?::\d+)?\b"), "<ip>"),
    (re.compile(r"\b(?:[0-9a-f]{0,4}:){2,7}[0-9a-f]{0,4}\b", re.IGNORECASE), "<ip>"),
    (re.compile(r"\b0x[0-9a-f]+\b", re.IGNORECASE), "<hex>"),
    (re.compile(r"\b\d+\b"), "<n>"),
    (re.compile(r"\s+"), " "),
)


def normalize_error_text(text: str) -> str:
    """Abstract what changes between two occurrences of the same failure: timestamps, ids, paths,
    addresses, pids and counts."""
    for pattern, replacement in _ABSTRACTIONS:
        text = pattern.sub(replacement, text)
    return text.strip().lower()


def host_family(facts: Mapping[str, Any]) -> tuple[str, str]:
    """(OS family, service manager): a fix verified on one kind of host is reused on the same kind only."""
    os_facts = facts.get("os") or {}
    family = (str(os_facts.get("id_like") or "").split() or [str(os_facts.get("id") or "")])[0]
    return family or "unknown", str(facts.get("service_manager") or "unknown")


@dataclass(frozen=True)
class Failure:
    """One failed service on one host, as service_check reported it (already redacted)."""

    host: str
    service: str
    failure_class: str
    summary: str
    evidence: Mapping[str, Any]
    spec: Mapping[str, Any]
    facts: Mapping[str, Any] = field(default_factory=dict)

    @classmethod
    def from_check(cls, host: str, result: Mapping[str, Any], facts: Mapping[str, Any] | None = None) -> Failure:
        """Build from one entry of service_check's ``failures`` (and the ``facts`` of the same check)."""
        for key in ("name", "failure_class", "summary", "evidence", "spec"):
            if key not in result:
                raise ConfigError(
                    "a failure from service_check lacks a key", field=f"failures[].{key}", value=dict(result),
                    hint="pass the 'failures' list that sentinel.heal.service_check returned, unchanged",
                )
        return cls(
            host=host,
            service=str(result["name"]),
            failure_class=str(result["failure_class"]),
            summary=str(result["summary"]),
            evidence=dict(result["evidence"]),
            spec=dict(result["spec"]),
            facts=dict(facts if facts is not None else result.get("facts") or {}),
        )

    def to_dict(self) -> dict[str, Any]:
        """The form service_check returns (and from_check reads back), with the host's facts."""
        return {"name": self.service, "failure_class": self.failure_class, "summary": self.summary,
                "evidence": dict(self.evidence), "spec": dict(self.spec), "facts": dict(self.facts)}

    @property
    def init_service(self) -> str:
        return str(self.spec.get("service") or self.service)

    @property
    def masked_unit(self) -> str | None:
        """The unit a person masked (service_check's failure class ``masked``, systemd hosts), which nothing may
        start or unmask; None when not masked."""
        if self.failure_class != "masked":
            return None
        return str((self.evidence.get("unit") or {}).get("Id") or self.init_service)

    @property
    def unit(self) -> str | None:
        """The systemd unit that runs the service (service_check resolves wrappers and aliases), without its
        ``.service`` suffix; None on hosts without systemd."""
        return running_unit(self.evidence, self.facts.get("service_manager"))

    @property
    def cause(self) -> str | None:
        """The journal's line that names what went wrong (systemd hosts), as service_check picked it."""
        cause = (self.evidence.get("unit") or {}).get("cause")
        return str(cause) if cause else None

    @property
    def what_changed(self) -> str | None:
        """What changed since the service last worked, as the host read it (service_check's ``changes``): each file
        with when and the lines of its diff that changed, each package change with its versions; None when nothing
        did or the service was never seen good. Quoted as the host's data, never as a fix."""
        changes = self.evidence.get("changes") or {}
        said = [_file_change(change) for change in (changes.get("files") or [])[:MAX_CHANGES_SAID]]
        collected_at = float(self.evidence.get("collected_at") or 0)
        said += [_package_change(change, collected_at) for change in (changes.get("packages") or [])[-MAX_CHANGES_SAID:]]
        return "what changed since it last worked: " + "; ".join(said) if said else None

    def known_good_copy(self, named: str | None) -> Mapping[str, Any] | None:
        """The changed file a restore of the last known good configuration would put back, when a change explains the
        configuration error: the file the error names (``named``, by its path or its name: nginx names the link in
        sites-enabled, the host the file it leads to) if it changed and the host kept its good copy, else, when the
        error names no file of a configuration, the only such file; None otherwise (a change elsewhere does not explain
        the error)."""
        kept = [change for change in (self.evidence.get("changes") or {}).get("files") or []
                if isinstance(change, Mapping) and change.get("change") == "modified" and change.get("good_sha256")]
        named = re.sub(r":[0-9]+$", "", named) if named else None  # FILE:LINE
        if named and self._a_configuration_file(named, kept):
            return next((change for change in kept if change["path"] == named), None) or next(
                (change for change in kept if posixpath.basename(str(change["path"])) == posixpath.basename(named)), None)
        return kept[0] if len(kept) == 1 else None

    def _a_configuration_file(self, path: str, kept: Sequence[Mapping[str, Any]]) -> bool:
        """Whether a path an error names can be one of the service's configuration files: below /etc, a declared
        ``configs`` pattern, or a changed file by its name. Any other path in an error line is not where the error is
        (MariaDB's "[ERROR] /usr/sbin/mariadbd: unknown variable ...", the program naming itself; InnoDB's note of the
        data file it loads, just before)."""
        return path.startswith("/etc/") or any(fnmatch.fnmatchcase(path, str(pattern)) for pattern in self.spec.get("configs") or []) or any(
            posixpath.basename(str(change["path"])) == posixpath.basename(path) for change in kept)

    def puts_back(self, plan: Plan) -> list[dict[str, str]]:
        """What the plan's restores of the last known good configuration put back (:func:`restores_of`)."""
        return restores_of([step.argv for step in plan.steps], self.evidence)

    @property
    def normalized_error(self) -> str:
        return normalize_error_text(self.summary)

    @property
    def fingerprint(self) -> str:
        """Same service, same failure class, same error text once abstracted, same kind of host."""
        key = "\x1f".join((self.service, self.failure_class, self.normalized_error, *host_family(self.facts)))
        return hashlib.sha256(key.encode()).hexdigest()[:32]


# the step that puts back a last known good file (the executor on the host does it: policies/default.yml)
RESTORE_PROGRAM = "sentinel-heal-restore"
# files and package changes named in one sentence, and the changed lines quoted of each file
MAX_CHANGES_SAID = 3
MAX_DIFF_LINES_SAID = 4
PACKAGE_ACTIONS = {"install": "installed", "upgrade": "upgraded", "remove": "removed", "purge": "purged"}


def _file_change(change: Mapping[str, Any]) -> str:
    when = f" {_ago(change['before_failure_s'])} before the failure" if change.get("before_failure_s") is not None else ""
    return f"{change['path']} {change['change']}{when}" + _said_lines(str(change.get("diff") or ""))


def _said_lines(diff: str) -> str:
    """The first lines a unified diff changes, quoted for one line of text (``: '-a' '+b'``); "" when it changes none."""
    lines = [line.rstrip() for line in _hunk_lines(diff) if line[:1] in "+-" and line[1:].strip()][:MAX_DIFF_LINES_SAID]
    return f": {' '.join(repr(line) for line in lines)}" if lines else ""


def _hunk_lines(diff: str) -> list[str]:
    """The lines of a unified diff's hunks, headers left out: a header is a line before the first @@, never a changed line
    that begins like one (memcached's option ``--max-conns`` removed reads ``---max-conns``)."""
    lines = diff.splitlines()
    first = next((number for number, line in enumerate(lines) if line.startswith("@@")), len(lines))
    return [line for line in lines[first:] if not line.startswith("@@")]


def puts_back_said(restores: Iterable[Mapping[str, str]]) -> str:
    """What a waiting plan's restores put back, for one line of a job's output (where no terminal showed the diff)."""
    return "".join(f"; puts back {restore['path']}{as_link(restore)}{_said_lines(restore.get('diff') or '')}" for restore in restores)


def as_link(restore: Mapping[str, str]) -> str:
    """How a restore that puts a link back says so, after the file's path ("" for a file put back as a file)."""
    return f" as the link to {restore['link']} it was" if restore.get("link") else ""


def restores_of(argvs: Iterable[Sequence[str]], evidence: Mapping[str, Any]) -> list[dict[str, str]]:
    """What the restores of the last known good configuration among ``argvs`` put back, as a person approves it: each
    file, the copy's hash, the diff from the file as it is now to that copy (the host's diff of the failure's
    ``evidence``, redacted and capped there, read the other way) and, where the good version was a link, its ``link``."""
    changes = {str(change.get("path")): change for change in (evidence.get("changes") or {}).get("files") or [] if isinstance(change, Mapping)}
    return [{"path": argv[1], "sha256": argv[2], "diff": _reversed_diff(str((changes.get(argv[1]) or {}).get("diff") or "")),
             # a link a person replaced by an edited copy comes back as the link it was
             **({"link": str(changes[argv[1]]["good_link"])} if (changes.get(argv[1]) or {}).get("good_link") else {})}
            for argv in argvs if len(argv) == 3 and argv[0] == RESTORE_PROGRAM]


def _reversed_diff(diff: str) -> str:
    """A unified diff read the other way (what was removed is added), headers and hunk ranges included; in each run of
    changed lines the removed ones come first, as diff writes them."""
    lines: list[str] = []
    changed: list[str] = []
    removed_header = None
    in_hunks = False  # the headers are the lines before the first @@ (_hunk_lines)
    for line in diff.splitlines():
        in_hunks = in_hunks or line.startswith("@@")
        if in_hunks and line[:1] in "+-":
            changed.append(("-" if line[0] == "+" else "+") + line[1:])
            continue
        lines += sorted(changed, key=lambda swapped: swapped[0] == "+")
        changed = []
        if in_hunks:
            lines.append(re.sub(r"^@@ -(\S+) \+(\S+) @@", r"@@ -\2 +\1 @@", line) if line.startswith("@@") else line)
        elif line.startswith("--- ") and removed_header is None:
            removed_header = line[4:]
        elif line.startswith("+++ ") and removed_header is not None:
            lines += ["--- " + line[4:], "+++ " + removed_header]
        else:
            lines.append(line)
    lines += sorted(changed, key=lambda swapped: swapped[0] == "+")
    return "\n".join(lines) + ("\n" if lines else "")


def _package_change(change: Mapping[str, Any], failed_at: float) -> str:
    versions = " -> ".join(str(version) for version in (change.get("before"), change.get("after")) if version)
    when = f" {_ago(failed_at - float(change['at']))} before the failure" if failed_at and change.get("at") else ""
    done = PACKAGE_ACTIONS.get(str(change.get("action")), str(change.get("action")))
    return f"package {change['package']} {done} {versions}{when}"


def _ago(seconds: float) -> str:
    seconds = max(0, round(seconds))
    if seconds < 120:
        return f"{seconds} s"
    if seconds < 7200:
        return f"{seconds // 60} min"
    return f"{seconds // 3600} h" if seconds < 172800 else f"{seconds // 86400} days"


@dataclass(frozen=True)
class Step:
    """One command of a plan: the template it came from and the argv it became."""

    template: str
    argv: tuple[str, ...]
    may_fail: bool = False
    # what its output goes through on the controller (``tail -n 50``, ``grep -i error``: brain/filters.py), as written
    output_filters: tuple[str, ...] = ()

    @property
    def command(self) -> str:
        return shlex.join(self.argv)

    def to_dict(self) -> dict[str, Any]:
        data: dict[str, Any] = {"template": self.template, "argv": list(self.argv), "may_fail": self.may_fail}
        if self.output_filters:  # absent otherwise, so the hash of a plan without filters stays what it was
            data["output_filters"] = list(self.output_filters)
        return data

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Step:
        return cls(template=str(data["template"]), argv=tuple(str(a) for a in data["argv"]), may_fail=bool(data.get("may_fail", False)),
                   output_filters=tuple(str(f) for f in data.get("output_filters") or ()))


@dataclass(frozen=True)
class Plan:
    """What to do about a failure: 0-3 steps, or an escalation with a reason."""

    source: PlanSource
    reference: str
    rationale: str
    steps: tuple[Step, ...] = ()
    escalation: str | None = None
    # where a remembered plan was first planned ("runbook nginx-stale-pid"), kept through every replay
    origin: str = ""

    @property
    def templates(self) -> tuple[str, ...]:
        return tuple(step.template for step in self.steps)

    @property
    def first_planned_by(self) -> str:
        return self.origin or f"{self.source.value} {self.reference}"

    def to_dict(self) -> dict[str, Any]:
        return {
            "source": self.source.value,
            "reference": self.reference,
            "rationale": self.rationale,
            "steps": [step.to_dict() for step in self.steps],
            "escalation": self.escalation,
            "origin": self.first_planned_by,
        }

    @classmethod
    def from_dict(cls, data: Mapping[str, Any]) -> Plan:
        """A plan as to_dict wrote it (in memory, in a stored plan)."""
        return cls(source=PlanSource(data["source"]), reference=str(data["reference"]), rationale=str(data["rationale"]),
                   steps=tuple(Step.from_dict(step) for step in data["steps"]), escalation=data.get("escalation"),
                   origin=str(data.get("origin") or ""))


@dataclass(frozen=True)
class StepResult:
    """What happened when a step ran on the host."""

    argv: tuple[str, ...]
    status: str  # ok | failed | skipped | refused | interrupted | unknown (a killed job's step, its run on another node)
    rc: int | None = None
    stdout: str = ""
    stderr: str = ""
    duration_s: float = 0.0

    @classmethod
    def from_evidence(cls, argv: tuple[str, ...], answer: Mapping[str, Any]) -> StepResult:
        """One answer of the evidence module (or of service_check's ``evidence.commands``): argv, rc, output, duration."""
        return cls(argv=argv, status="ok" if answer.get("rc") == 0 else "failed", rc=answer.get("rc"), stdout=str(answer.get("output", "")),
                   duration_s=float(answer.get("duration") or 0.0))

    @property
    def output(self) -> str:
        return "\n".join(part for part in (self.stdout, self.stderr) if part)

    @property
    def refused_by(self) -> str | None:
        """The rule of the host's executor that refused the step (``service-healthy``, ...), or None."""
        found = _REFUSED_BY_THE_HOST.match(self.stderr) if self.status == "refused" else None
        return found[1] if found else None

    def to_dict(self) -> dict[str, Any]:
        data = asdict(self)
        data["argv"] = list(self.argv)
        return data


# how a step the host's executor refused says so (exec/runner.py), its rule first
REFUSED_BY_THE_HOST = "refused by the host's executor ({rule}): {reason}"
_REFUSED_BY_THE_HOST = re.compile(r"^refused by the host's executor \(([\w.-]+)\): ")


@dataclass(frozen=True)
class PendingPlan:
    """What binds a plan that waits for a human: its hash, its policy and its expiry."""

    plan_hash: str
    policy_file: str
    created_at: float
    expires_at: float


@dataclass(frozen=True)
class Hold:
    """A limit that held an incident back before anything ran, as the person reads it: which one (``limit``: flapping,
    max_running, max_hosts_per_run, max_attempts_per_run, suspension, silence, maintenance_marker, maintenance_window),
    what it says, until when (``until``, seconds since the epoch; None when a person or the next run ends it, which
    ``ends`` says in words) and the exact command that resets or lifts it now."""

    limit: str
    said: str
    lift: str
    until: float | None = None
    ends: str = ""

    def when(self, now: float | None = None) -> str:
        return f"until {moment(self.until, now)}" if self.until is not None else self.ends

    def describe(self, now: float | None = None, meanwhile: str = "") -> str:
        """What it says, what it means meanwhile (``meanwhile``: "nothing runs"), until when and the command, last."""
        return f"{self.said}{'; ' + meanwhile if meanwhile else ''}; the {self.limit} limit holds {self.when(now)}; to lift it now: {self.lift}"

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


@dataclass
class Attempt:
    """One pass through diagnose → plan → guard → execute → verify, or a limit's refusal of one before diagnosis
    (``held_by`` without a plan): recorded as an episode all the same, so the memory and the audit trail say what held."""

    number: int
    diagnosis: str = ""
    evidence_results: dict[str, StepResult] = field(default_factory=dict)
    plan: Plan | None = None
    verdicts: list[Verdict] = field(default_factory=list)
    policy_version: str = ""
    results: list[StepResult] = field(default_factory=list)
    verified: bool = False
    verification: Mapping[str, Any] = field(default_factory=dict)
    approved_by: str | None = None
    outcome: str = ""
    artifacts: list[str] = field(default_factory=list)  # ansible-runner's run directories, evidence and remediation
    # the think loop's rounds of reads before the plan (brain/investigation.py ReadRound)
    rounds: list[Any] = field(default_factory=list)
    # the fleet incident the attempt was part of (its id, hosts, what they share), as the rollout node saw it
    fleet_incident: Mapping[str, Any] | None = None
    # the limit that held the attempt back before its remediation ran (the kill switch, the blast radius, flapping, a silence)
    held_by: Hold | None = None
    started_at: float = 0.0
    finished_at: float = 0.0

    @property
    def refused(self) -> bool:
        """A limit refused the incident an attempt before any diagnosis: not a heal attempt (nor counted as one)."""
        return self.held_by is not None and self.plan is None

    @property
    def decision(self) -> Decision:
        return Decision.strictest([v.decision for v in self.verdicts])
