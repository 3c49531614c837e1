"""Reading a failure as an operator reads it: the service's own error lines, classified by what they say.

Which check failed says little (a dead process, a closed port); the service says why, in its journal, its log, the
output of a failed start or of its configuration test. Each line is classified by what it says, most decisive kind
first: the service is not installed, a configuration is invalid (which file, which line or parameter), a library or
module is missing, a disk is full, the address is in use, permission or ownership is wrong, a file or directory is
missing. A configuration test that fails for a reason that is not the configuration (``nginx -t`` cannot open its log
because /var/log/nginx is gone) reads as that reason: the test's closing line ("test failed") counts as an invalid
configuration only when nothing in the same text names another cause.

The newest text is read first (the output of the step that failed last, then what the evidence commands printed, the
unit's journal since its last start, the status, the tail of each log), so a finding from this failure comes before
an old line of a log.
"""

from __future__ import annotations

import dataclasses
import posixpath
import re
from dataclasses import dataclass
from typing import Any, Callable, Collection, Iterable, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.module_utils._guard.context import POLICY_TABLE
from ansible_collections.sentinel.heal.plugins.module_utils._host.probe import since_last_start
from ansible_collections.sentinel.heal.plugins.module_utils._host.systemd import JOURNAL_LINE, error_blocks
from ansible_collections.sentinel.heal.plugins.module_utils._text import clip
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure, StepResult

LINE_LIMIT = 240
LINES_PER_FINDING = 3
# A log keeps last week's trouble, and most lines carry no time a reader can trust to compare: only the newest lines
# are read, where a service that failed just now left its cause (a killed one leaves none, and an old line stays old).
LOG_LINES_READ = 5
# evidence commands that print what was logged before, not what the service says now
HISTORY_READERS = frozenset({"journalctl", "tail", "head", "cat", "less", "grep", "zcat", "zgrep", "dmesg"})
# (kind, what such a line says); a line takes the first kind that matches
KIND_PATTERNS: tuple[tuple[str, re.Pattern[str]], ...] = tuple((kind, re.compile(pattern, re.IGNORECASE)) for kind, pattern in (
    ("not_installed", r"unrecognized service|\bunit \S+ (?:not found|could not be found)|no init script or unit named"),
    ("no_space", r"no space left on device|\bENOSPC\b|disk quota exceeded|\(28: "),
    ("address_in_use", r"address already in use|\bEADDRINUSE\b|\(98: "),
    ("missing_dependency", r"error while loading shared libraries|cannot open shared object file|no module named|ModuleNotFoundError"
                           r"|undefined symbol|dlopen\(\) .* failed"),
    ("permission", r"permission denied|operation not permitted|\(13: |wrong ownership|invalid permissions|must be owned by"
                   r"|bad ownership|insecure permissions"),
    ("missing_path", r"no such file or directory|\(2: |does not exist|missing privilege separation directory|\bENOENT\b"),
    ("invalid_config", r"\[emerg\]|invalid value for parameter|unrecognized configuration parameter|syntax error|bad directive"
                       r"|fatal config file error|bad configuration option|unsupported option|invalid command|unknown directive"
                       r"|unknown variable|unknown option|directive is not allowed|is not terminated by|unexpected end of file"
                       r"|unexpected \"|invalid number of arguments|wrong number of arguments|unknown keyword"
                       # a program refusing the options its configuration gives it (getopt's words: memcached's
                       # /etc/memcached.conf is its command line)
                       r"|unrecognized option|unrecognised option|invalid option|illegal argument|option requires an argument"
                       # redis 8 takes a directive it does not know for a module's, starts, and then aborts in its log
                       r"|unresolved configuration|module configuration detected without loadmodule"),
))
# the closing line of a configuration test, which says only that it failed
CONFIG_TEST_FAILED = re.compile(r"configuration file \S+ test failed|configuration file \"?\S+\"? contains errors|config(?:uration)? test failed"
                                r"|fatal errors found in configuration",
                                re.IGNORECASE)
KINDS = tuple(kind for kind, _pattern in KIND_PATTERNS)
# a service's own test of its configuration (it reads the configuration the service would start with)
CONFIG_TEST = re.compile(r"^(?:\S*/)?(?:(?:nginx|sshd|php-fpm\S*|httpd) (?:-\w+ )*-t\b|apache2?ctl (?:configtest|-t)\b|haproxy -c\b"
                         r"|named-checkconf\b|unbound-checkconf\b|rsyslogd -N|dnsmasq --test\b)")
# Lines that say what a failed start left behind, never why it failed: systemd looks for the PID file of a unit whose
# start command failed before the service could write it ("Can't open PID file /run/postgresql/15-main.pid (yet?)
# after start: No such file or directory"); read as a missing path, it would hide the service's own line.
AFTERMATH = re.compile(r"can't open pid file \S+ \(yet\?\) after start", re.IGNORECASE)
# An init script's word on a limit it could not raise ("/etc/init.d/redis-server: 51: ulimit: error setting limit
# (Operation not permitted)", in a container): the daemon starts without it, so it is no cause, and the path it names is
# the script's, never the file an error of the lines after it is in.
LIMIT_NOT_RAISED = re.compile(r"\bulimit: error setting limit\b", re.IGNORECASE)
# service_check's note in place of a declared log it could not read ("(cannot read: '/var/log/memcached.log' does not
# exist)": memcached writes that file under its sysv script only, and logs to the journal under systemd): its words, not
# the service's. A directory the service needs that is gone is said by the service, or by its declared paths.
UNREADABLE_LOG = re.compile(r"^\(cannot read: .*\)$")
# The kinds no restart or retry can fix: each start fails the same way until a person acts.
NO_RETRY_HELPS = frozenset({"not_installed", "invalid_config", "missing_dependency"})
_QUOTED_PATH = re.compile(r"[\"'`\u2018\u201c](/[^\"'`\u2019\u201d]+)[\"'`\u2019\u201d]")
_BARE_PATH = re.compile(r"(?<![\w.:])(/(?:[\w.@+-]+/)*[\w.@+-]+)/?")
_CONFIG_PLACE = (
    re.compile(r"\bin (?P<file>/\S+?):(?P<line>\d+)"),  # nginx
    re.compile(r"\bline (?P<line>\d+) of (?P<file>/\S+?):?(?:\s|$)"),  # apache
    re.compile(r"(?P<file>/\S+?): line (?P<line>\d+)"),  # sshd
    re.compile(r"configuration file \"(?P<file>/[^\"]+)\""),  # postgres
    re.compile(r"\bat line (?P<line>\d+)"),  # redis
)
_PARAMETER = re.compile(r"parameter \"(?P<name>[\w.]+)\"|(?:directive|variable|option) [\"'](?P<other>[\w.-]+)[\"']", re.IGNORECASE)
# "Can't open the log file" (redis names no path): the file is the service's declared log
_ITS_LOG = re.compile(r"\blog ?file\b", re.IGNORECASE)
# systemd names no path when a unit's WorkingDirectory= is missing ("Failed at step CHDIR spawning /usr/sbin/nginx" names
# the program): the path is the WorkingDirectory= of the unit's definition, once `systemctl cat UNIT` was read
_CHDIR = re.compile(r"requested working directory|\bat step CHDIR\b|status=200/CHDIR", re.IGNORECASE)
_WORKING_DIRECTORY = re.compile(r"^\s*WorkingDirectory=-?(/\S*)\s*$", re.MULTILINE)


@dataclass(frozen=True)
class PackageDir:
    """A directory of the service's own, with the owner, group and mode it should have (the host's reading of it, else
    the policy's package_paths)."""

    path: str
    owner: str
    group: str
    mode: str
    # everything below has the same owner and group
    tree: bool = False
    # where the owner, group and mode come from, for a person: "unit RuntimeDirectory=", "dpkg-statoverride",
    # "seen while healthy at ...", the policy's package_paths
    source: str = POLICY_TABLE


@dataclass(frozen=True)
class Finding:
    """One kind of trouble, in the service's own words, and where those words were read."""

    kind: str
    lines: tuple[str, ...]
    source: str
    path: str | None = None
    place: str | None = None  # the configuration's file and line, or the parameter it rejects
    package_dir: PackageDir | None = None  # the package directory the path is (in), when it is the service's own

    @property
    def said(self) -> str:
        return " | ".join(self.lines)

    def describe(self) -> str:
        """The service's words quoted, as data, with where they were read: a person reads what a log said, never an
        instruction of ours (a line someone wrote there may say "to fix, run ...")."""
        return f'"{self.said}" ({self.source})'

    def to_dict(self) -> dict[str, Any]:
        return {"kind": self.kind, "said": self.said, "source": self.source, "path": self.path, "place": self.place,
                "package_dir": None if self.package_dir is None else self.package_dir.path}


@dataclass(frozen=True)
class Reading:
    """What the failure's texts say went wrong, newest and most decisive first."""

    findings: tuple[Finding, ...] = ()
    # the package directory of each declared path and log directory of the service that is (in) one
    package_dirs: Mapping[str, PackageDir] = dataclasses.field(default_factory=dict, compare=False)
    # that the cause an earlier run reported for the failure is gone (the present evidence shows it fixed), or None
    cause_gone: str | None = dataclasses.field(default=None, compare=False)

    @property
    def kinds(self) -> frozenset[str]:
        return frozenset(finding.kind for finding in self.findings)

    def first(self, kind: str) -> Finding | None:
        return next((finding for finding in self.findings if finding.kind == kind), None)

    @property
    def decisive(self) -> Finding | None:
        """The finding that explains the failure best: the newest text's most decisive kind."""
        return self.findings[0] if self.findings else None

    def describe(self) -> str:
        return self.decisive.describe() if self.decisive else "nothing in its texts names a cause"

    def placeholder_values(self) -> dict[str, str]:
        """What runbooks may fill in from the reading (see runbooks.READING_PLACEHOLDERS)."""
        values: dict[str, str] = {}
        if self.decisive is not None:
            values["reading"] = self.describe()
        missing = self.first("missing_path")
        if missing is not None and missing.package_dir is not None:
            values.update(_package_values("missing_dir", missing.package_dir))
        elif missing is not None and missing.path:  # outside the directories the service's package made
            values["missing_path"] = missing.path
        wrong = self.first("permission")
        if wrong is not None and wrong.package_dir is not None:
            values.update(_package_values("package_dir", wrong.package_dir))
        invalid = self.first("invalid_config")
        if invalid is not None:
            values["config_error"] = f'"{invalid.said}"' + (f" ({invalid.place})" if invalid.place else "")
        return values

    def to_dict(self) -> list[dict[str, Any]]:
        return [finding.to_dict() for finding in self.findings]


NOTHING_READ = Reading()


def _package_values(prefix: str, directory: PackageDir) -> dict[str, str]:
    return {prefix: directory.path, f"{prefix}_owner": directory.owner, f"{prefix}_group": directory.group, f"{prefix}_mode": directory.mode}


def failure_texts(failure: Failure, outputs: Mapping[str, str], steps: Sequence[StepResult] = ()) -> list[tuple[str, str]]:
    """(source, text) of everything the failure says, newest first: the steps that failed (last first), the evidence
    commands, the unit's journal since its last start, the status, and the newest lines of each log and of the evidence
    commands that print history (a journal or a log read whole)."""
    texts = [(f"output of {' '.join(step.argv)}", step.output) for step in reversed(steps) if step.status == "failed" and step.output]
    logs = [str(log) for log in failure.spec.get("logs") or []]
    # a command that prints history (journalctl -n 30, tail -n 30 LOG) may print last week's trouble: read with the logs
    fresh = {command: text for command, text in outputs.items()
             if command.split(" ", 1)[0] not in HISTORY_READERS and not any(log in command for log in logs)}
    texts += [(f"output of {command}", text) for command, text in fresh.items()]
    evidence = failure.evidence
    unit = evidence.get("unit") or {}
    if unit.get("journal"):
        entries = [JOURNAL_LINE.match(line) for line in str(unit["journal"]).splitlines()]
        said = [(entry.group("ident"), entry.group("message")) for entry in entries if entry]
        name = unit.get("Id", failure.init_service)
        # the service's own lines first; systemd's about it ("Can't open PID file ... (yet?)") say what followed
        texts.append((f"journal of {name}", "\n".join(message for ident, message in said if ident != "systemd")))
        texts.append((f"systemd's journal of {name}", "\n".join(message for ident, message in said if ident == "systemd")))
    status = evidence.get("status") or {}
    if status.get("output"):
        texts.append((f"output of {status.get('command') or 'its status'}", str(status["output"])))
    for path, tail in (evidence.get("logs") or {}).items():
        texts.append((f"log {path}", "\n".join(str(tail).splitlines()[-LOG_LINES_READ:])))
    # a log read later (tail, grep) holds what service_check left out of the evidence: lines older than the failure
    started, offset = evidence.get("failing_since", evidence.get("started_at")), evidence.get("utc_offset")
    started = started if isinstance(started, (int, float)) and not isinstance(started, bool) else None
    offset = offset if isinstance(offset, int) and not isinstance(offset, bool) else 0
    texts += [(f"output of {command}", "\n".join(since_last_start(text, started, offset).splitlines()[-LOG_LINES_READ:]))
              for command, text in outputs.items() if command not in fresh]
    return texts


def read_texts(texts: Iterable[tuple[str, str]], locate: Callable[[str], PackageDir | None] = lambda path: None) -> Reading:
    """Classify every line of every text; one finding per kind, from the newest text that has it. ``locate`` tells
    whether a path is (in) a directory the service's package made."""
    findings: list[Finding] = []
    for source, text in texts:
        classified = _classified(text)
        findings += [_finding(kind, classified[kind], source, locate) for kind in KINDS
                     if kind in classified and all(found.kind != kind for found in findings)]
    return Reading(tuple(findings))


def read_failure(failure: Failure, outputs: Mapping[str, str], steps: Sequence[StepResult] = (),
                 locate: Callable[[str], PackageDir | None] = lambda path: None, passed: Collection[str] = ()) -> Reading:
    """The failure's reading. ``passed``: the evidence commands that exited 0 (with service_check's own, read on the
    host): a configuration test among them outweighs a line of a log or journal that calls the configuration invalid,
    which is then an old line, or one someone wrote there, and no cause. So does a configuration the service last
    worked with (nothing changed since its last known good): a person put the file back after the service failed to
    start with it, and the journal since that start still says so. A start that fails again says it in its own output."""
    reading = read_texts(failure_texts(failure, outputs, steps), locate)
    host_passed = [" ".join(map(str, answer.get("argv") or ())) for answer in failure.evidence.get("commands") or ()
                   if isinstance(answer, Mapping) and answer.get("rc") == 0]
    changes = failure.evidence.get("changes")
    as_last_good = isinstance(changes, Mapping) and not changes.get("files") and not changes.get("packages")
    if as_last_good or any(CONFIG_TEST.search(command) for command in (*passed, *host_passed)):
        reading = Reading(tuple(finding for finding in reading.findings
                                if not (finding.kind == "invalid_config" and _recorded(finding.source))))
    logs = [str(log) for log in failure.spec.get("logs") or []]
    service_paths = [str(path) for path in failure.spec.get("paths") or []] + [posixpath.dirname(log) for log in logs]
    package_dirs = {path: located for path in dict.fromkeys(service_paths) if (located := locate(path)) is not None}
    definitions = [text for command, text in outputs.items() if command.startswith("systemctl cat ")]
    working_directory = next((found[-1] for text in definitions for found in [_WORKING_DIRECTORY.findall(text)] if found), None)

    def named(finding: Finding) -> Finding:
        if finding.kind not in ("missing_path", "permission"):
            return finding
        if _CHDIR.search(finding.said):  # the working directory itself is missing: a package directory only when it is one
            located = locate(working_directory) if working_directory else None
            itself = located if located and located.path == working_directory else None
            return dataclasses.replace(finding, path=working_directory, package_dir=itself)
        if logs and finding.path is None and _ITS_LOG.search(finding.said):
            return dataclasses.replace(finding, path=logs[0], package_dir=locate(logs[0]))
        return finding

    return Reading(tuple(named(finding) for finding in reading.findings), package_dirs)


def _recorded(source: str) -> bool:
    """Whether a text says what was written before (a log, a journal, a command that prints history), not what a
    test says now."""
    command = source.removeprefix("output of ")
    return source.startswith(("log ", "journal of ", "systemd's journal of ")) or (
        command != source and command.split(" ", 1)[0] in HISTORY_READERS)


def _classified(text: str) -> dict[str, list[tuple[str, tuple[str, ...]]]]:
    """The lines of one text by kind (each whole, with the lines that carry it on - PostgreSQL's DETAIL, the lines of
    redis's FATAL block - and with the two lines before it, which often name the file), at most LINES_PER_FINDING each,
    in order; a configuration test's closing line counts only when no line of the text names another kind."""
    by_kind: dict[str, list[tuple[str, tuple[str, ...]]]] = {}
    closing: list[tuple[str, tuple[str, ...]]] = []
    before: list[str] = []
    for block in error_blocks([clip(raw.strip(), LINE_LIMIT) for raw in text.splitlines() if raw.strip()]):
        line = " | ".join(block)
        if LIMIT_NOT_RAISED.search(line) or UNREADABLE_LOG.match(line):
            continue
        context = tuple(before[-2:])
        before.append(line)
        if AFTERMATH.search(line):
            continue
        kind = next((kind for kind, pattern in KIND_PATTERNS if any(pattern.search(part) for part in block)), None)
        if kind is None:
            if CONFIG_TEST_FAILED.search(line):
                closing.append((line, context))
            continue
        said = by_kind.setdefault(kind, [])
        if all(line != seen for seen, _context in said) and len(said) < LINES_PER_FINDING:
            said.append((line, context))
    if closing and "invalid_config" in by_kind:  # it names the file the lines before it did not
        by_kind["invalid_config"] += closing[:LINES_PER_FINDING - len(by_kind["invalid_config"])]
    elif closing and not by_kind:
        by_kind["invalid_config"] = closing[:LINES_PER_FINDING]
    return by_kind


def _finding(kind: str, said: list[tuple[str, tuple[str, ...]]], source: str, locate: Callable[[str], PackageDir | None]) -> Finding:
    lines = [line for line, _context in said]
    if kind == "invalid_config":  # the lines between say where: redis prints the line number and the directive there
        lines = list(dict.fromkeys(part for line, context in said for part in (*context, line)))[:LINES_PER_FINDING + 2]
    # the path the lines name, else one the lines just before them name (redis prints the file a line earlier)
    # what is missing is never the place in a configuration that names it (haproxy's "[/etc/haproxy/haproxy.cfg:5] ...
    # cannot bind UNIX socket (No such file or directory) [/run/haproxy/admin.sock]")
    places = kind != "missing_path"
    path = next((found for line in lines for found in _paths(line, places)), None) or next(
        (found for _line, context in said for line in reversed(context) for found in _paths(line, places)), None)
    return Finding(kind=kind, lines=tuple(lines), source=source, path=path, place=_place(lines) if kind == "invalid_config" else None,
                   package_dir=locate(path) if path else None)


def _paths(line: str, places: bool = True) -> list[str]:
    """The paths a line names, quoted ones first; without ``places``, none written as FILE:LINE."""
    quoted = _QUOTED_PATH.findall(line)
    found = quoted or [match[1] for match in _BARE_PATH.finditer(line) if places or not re.match(r":\d", line[match.end():])]
    return found


def _place(lines: Sequence[str]) -> str | None:
    parts: list[str] = []
    for line in lines:
        for pattern in _CONFIG_PLACE:
            found = pattern.search(line)
            if found:
                named = found.groupdict()
                where = " ".join(part for part in (named.get("file"), f"line {named['line']}" if named.get("line") else None) if part)
                if where not in parts:
                    parts.append(where)
                break
        parameter = _PARAMETER.search(line)
        if parameter:
            name = parameter.group("name") or parameter.group("other")
            if f"parameter {name}" not in parts:
                parts.append(f"parameter {name}")
    return ", ".join(parts) or None
