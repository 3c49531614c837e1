"""The guard: decides ALLOW / APPROVE / BLOCK for each command a plan proposes.

Parse, don't pattern-match. A command is refused outright when it carries characters the
executor would never hand to a shell anyway (control and non-ASCII characters, shell syntax),
then split with :mod:`shlex`, cross-checked against bash's own grammar (both must read the same
argv, see :mod:`.bash`) and decided by rules read from a YAML policy file: hard denies by
executable, then the first rule of the executable whose arguments match. Anything the policy does
not understand is APPROVE; nothing is allowed by default. The rule language is documented at the
top of ``policies/default.yml``.

Importable without Ansible's runtime for tests and benchmarks::

    from ansible_collections.sentinel.heal.plugins.plugin_utils.policy import PolicyContext, evaluate
    evaluate("service nginx restart", PolicyContext(service="nginx", init_service="nginx"))
"""

from __future__ import annotations

import dataclasses
import fnmatch
import hashlib
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from enum import StrEnum
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence

import yaml

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import PolicyFileError
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.bash import bash_words
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.paths import PathResolver, compile_patterns, validate_symlinks
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision, Failure, Verdict

DEFAULT_POLICY_FILE = Path(__file__).resolve().parents[2] / "policies" / "default.yml"
# Every fork of a play reads the policy (and the runbooks) again, in a process of its own: libyaml's safe loader, where
# PyYAML has it, reads the default policy in an eighth of the time the pure-Python one takes.
YAML_LOADER: Any = getattr(yaml, "CSafeLoader", yaml.SafeLoader)

# Characters that mean something to a shell. The executor never uses a shell, so a command that
# contains them is either an attack or a plan that would not do what it says. Globs and braces
# mean nothing inside quotes, so there a rule may accept them: the glob characters for arguments
# it matches with {glob} (find -name '*.gz'), braces with {curl_write_out} (curl -w '%{http_code}').
SHELL_SYNTAX = frozenset(";&|<>`$(){}*?[]\\!#~")
GLOB_CHARACTERS = frozenset("*?[]")
BRACE_CHARACTERS = frozenset("{}")
QUOTABLE_CHARACTERS = GLOB_CHARACTERS | BRACE_CHARACTERS
TRUSTED_BIN_DIRS = frozenset({"/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"})
ANY_EXECUTABLE = "*"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "ip6-localhost"})
# where services keep their data: a read of the incident's files names its declared ones there, nothing else
DATA_AREAS = ("/var/lib", "/var/cache", "/var/spool", "/srv", "/opt", "/home", "/var/backups")
# system directories where a package puts one file named for its service: that file is the service's own
SHARED_CONFIGURATION_DIRS = ("/etc/default", "/etc/logrotate.d", "/etc/init.d", "/etc/sysconfig")

_PLACEHOLDER = re.compile(r"\{([a-z_]+)(?::([A-Za-z0-9]+))?\}")
_CANONICAL_INT = re.compile(r"^(0|[1-9][0-9]*)$")
_SED_PRINT = re.compile(r"^([1-9][0-9]*(,[1-9][0-9]*)?)?p$")
# curl -w text that prints only numbers curl measured: not @FILE (reads a file), %output{} (writes one), %header{},
# %{url}, %{json} or any other variable that carries what the server or the command said.
_CURL_WRITE_OUT = re.compile(
    r"^[A-Za-z0-9 :=,._/-]*(%\{(http_code|response_code|http_connect|time_namelookup|time_connect|time_appconnect|time_pretransfer"
    r"|time_redirect|time_starttransfer|time_total|size_download|size_header|size_request|size_upload|speed_download|speed_upload"
    r"|num_connects|num_redirects|exitcode)\}[A-Za-z0-9 :=,._/-]*)+$")
# A value that starts with "-" becomes an option of the tool, or of one it wraps (service passes it to systemctl).
_WORD = re.compile(r"^[A-Za-z0-9@._+,:%=][A-Za-z0-9@._+,:%=-]*$")
_NAME = re.compile(r"^[A-Za-z0-9@._+][A-Za-z0-9@._+-]*$")
_PG_CLUSTER = re.compile(r"/var/lib/postgresql/(\d+)/([A-Za-z0-9_-]+)(/|$)|postgresql-(\d+)-([A-Za-z0-9_-]+)\.log$")
# a file name that says it holds a key or a password, wherever it lies (server-key.pem, privkey.crt, db-password.pem)
_NAMED_LIKE_A_KEY = re.compile(r"(?i)priv|secret|passw|shadow|token|credential|(^|[._-])keys?([._-]|$)")
# what /proc tells of a process's state and limits (not its environment, memory, command line or open files)
_PROCESS_STATE_FILE = re.compile(r"^/proc/([1-9][0-9]*)/(status|limits|stat|statm|io|oom_score|oom_score_adj|cgroup|wchan)$")
_RESOLVES_LAST = re.compile(r"/\.?/*$")
_SIGNED_SIZE = re.compile(r"^[+-]?[1-9][0-9]{0,8}[ckMG]?$")
_ROTATED_LOG = re.compile(r"\.(\d+|gz|xz|bz2|zst|old)$")
_GLOB = re.compile(r"^[A-Za-z0-9@._*?-]+$")
_OCTAL_MODE = re.compile(r"^[0-7]{3,4}$")
_UNIT_INSTANCE = re.compile(r"^[A-Za-z0-9_.:-]+@[A-Za-z0-9_.:-]+?(\.service)?$")
# No userinfo, query or escapes: what reaches the service is a plain GET of a plain path.
_LOOPBACK_URL = re.compile(r"^(?P<scheme>https?)://(127\.0\.0\.1|localhost|\[::1\])(:(?P<port>[1-9][0-9]{0,4}))?(/[A-Za-z0-9._~/-]*)?$")
_HTTP_URL = re.compile(r"^(?P<scheme>https?)://(\[[^]]*\]|[^/:]*)(:(?P<port>[0-9]{1,5}))?(/|$)")
_TOP_KEYS = frozenset({"version", "include_default", "max_command_length", "protected_processes", "protected_services",
                       "protected_paths", "secret_paths", "not_secret", "system_reads", "path_symlinks", "package_paths", "blocked", "rules"})
_RULE_KEYS = frozenset({"id", "description", "executable", "services", "argv", "options", "operands", "requires",
                        "any_argument", "allow_globs", "allow_braces", "decision", "become", "restores", "effect", "read_only"})


@dataclass(frozen=True)
class PolicyContext:
    """What the incident knows, so rules can bind arguments to it (the service's own unit, ...)."""

    service: str | None = None
    init_service: str | None = None
    # the systemd unit service_check found running the service (postgresql@15-main behind Debian's postgresql)
    unit: str | None = None
    process: str | None = None
    port_owners: Mapping[int, str] = field(default_factory=dict)
    service_pids: frozenset[int] = frozenset()
    ports: frozenset[int] = frozenset()
    stale_pidfile: str | None = None
    # declared Unix sockets nothing has bound, and their lock files naming a pid that is not the service's
    stale_sockets: tuple[str, ...] = ()
    stale_locks: tuple[str, ...] = ()
    log_files: tuple[str, ...] = ()
    service_dirs: tuple[str, ...] = ()
    log_dirs: tuple[str, ...] = ()
    # the ports of the service's declared HTTP check: the only ones a loopback HTTP probe may reach
    http_ports: frozenset[int] = frozenset()
    # the inventory's hosts (names and addresses): with loopback, the only hosts a probe may reach
    probe_hosts: frozenset[str] = frozenset()
    # the PostgreSQL clusters (version, name) the service declares: the only ones pg_ctlcluster may act on
    pg_clusters: frozenset[tuple[str, str]] = frozenset()
    # who owns each directory on the way to the service's declared paths, as service_check saw it on the host
    # ("(link)" for a symbolic link): a repair below a directory a service account owns could be redirected
    path_owners: Mapping[str, str] = field(default_factory=dict)
    # the host's mount points, when service_check reported them: a recursive repair never crosses one
    mounts: tuple[str, ...] | None = None
    # files of the service outside its directories: its unit file and drop-ins, pid file, sockets, logs, and the files
    # named for it in the system's shared directories (/etc/default/NAME, ...)
    own_files: tuple[str, ...] = ()

    @classmethod
    def from_failure(cls, failure: Failure, probe_hosts: Iterable[str] = ()) -> PolicyContext:
        spec, evidence = failure.spec, failure.evidence
        pidfile = evidence.get("pidfile") or {}
        owners = {
            int(owner["pid"]): str(owner.get("process", ""))
            for owner in evidence.get("port_owners") or []
            if isinstance(owner.get("pid"), int)
        }
        # a port owner in the cgroup of one of the service's own units is the service's own, whatever its name
        in_own_units = {int(owner["pid"]) for owner in evidence.get("port_owners") or [] if owner.get("own") and isinstance(owner.get("pid"), int)}
        process = str(spec.get("process") or failure.init_service)
        names = dict.fromkeys((failure.service, failure.init_service))
        logs = [str(p) for p in spec.get("logs") or ()]
        stale_sockets, stale_locks = left_over_sockets(evidence)
        return cls(
            service=failure.service,
            init_service=failure.init_service,
            unit=failure.unit,
            process=process,
            port_owners=owners,
            service_pids=frozenset(int(pid) for pid in evidence.get("processes") or [] if isinstance(pid, int)) | in_own_units,
            ports=frozenset(int(port) for port in spec.get("ports") or []),
            stale_pidfile=pidfile.get("path") if pidfile.get("exists") and not pidfile.get("alive") else None,
            stale_sockets=stale_sockets,
            stale_locks=stale_locks,
            log_files=tuple(logs),
            service_dirs=service_dirs(failure),
            log_dirs=tuple(dict.fromkeys([f"/var/log/{name}" for name in names] + [posixpath.dirname(posixpath.normpath(log)) for log in logs])),
            http_ports=frozenset(port for port in [_http_port((spec.get("http") or {}).get("url"))] if port is not None),
            probe_hosts=frozenset(probe_hosts),
            pg_clusters=_pg_clusters([*(str(p) for p in spec.get("paths") or []), str(spec.get("pidfile") or ""), *logs]),
            path_owners={str(path): str(owner) for path, owner in (evidence.get("path_owners") or {}).items()},
            mounts=None if evidence.get("mounts") is None else tuple(str(mount) for mount in evidence["mounts"]),
            own_files=_own_files_of(failure),
        )


def _own_files_of(failure: Failure) -> tuple[str, ...]:
    """The service's files outside its directories: declared, its unit's, named for it in shared directories, and
    what its packages put in /etc (service_check's ``packages``)."""
    spec, unit = failure.spec, failure.evidence.get("unit") or {}
    names = dict.fromkeys(name for name in (failure.service, failure.init_service) if name)
    declared = [*(spec.get("logs") or []), *(spec.get("sockets") or []), *([spec["pidfile"]] if spec.get("pidfile") else [])]
    unit_files = [unit.get("FragmentPath") or "", *str(unit.get("DropInPaths") or "").split()]
    shared = [f"{directory}/{name}" for name in names for directory in SHARED_CONFIGURATION_DIRS]
    packaged = (failure.evidence.get("packages") or {}).get("etc") or []
    return tuple(dict.fromkeys(str(path) for path in [*declared, *unit_files, *shared, *packaged] if str(path).startswith("/")))


def left_over_sockets(evidence: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The declared Unix sockets service_check saw nothing bound to, and the lock files it saw naming a pid that is not
    the service's (its ``evidence.sockets``)."""
    sockets = [info for info in evidence.get("sockets") or () if isinstance(info, Mapping)]
    return (tuple(str(info["path"]) for info in sockets if info.get("stale")),
            tuple(str(info["lock"]["path"]) for info in sockets if (info.get("lock") or {}).get("stale")))


def _pg_clusters(paths: Iterable[str]) -> frozenset[tuple[str, str]]:
    clusters = set()
    for path in paths:
        match = _PG_CLUSTER.search(path)
        if match:
            version, name = (match.group(1), match.group(2)) if match.group(1) else (match.group(4), match.group(5))
            clusters.add((version, name))
    return frozenset(clusters)


def _http_port(url: Any) -> int | None:
    match = _HTTP_URL.match(str(url or ""))
    return None if match is None else _url_port(match)


def _url_port(match: re.Match[str]) -> int:
    """The port a URL reaches: the one it names, or its scheme's."""
    return int(match.group("port")) if match.group("port") else (443 if match.group("scheme") == "https" else 80)


def service_dirs(failure: Failure) -> tuple[str, ...]:
    """Directories that belong to the service: declared ``paths``, the usual per-service directories
    and the directories of its log files. Remediation may write only below these; the policy drops
    the shared ones (``/var/log`` when a log is ``/var/log/auth.log``) when it compares."""
    names = dict.fromkeys((failure.service, failure.init_service))
    candidates = [str(p) for p in failure.spec.get("paths") or []]
    candidates += [f"{base}/{name}" for name in names for base in ("/var/log", "/run", "/var/run", "/var/lib", "/var/cache")]
    candidates += [posixpath.dirname(str(log)) for log in failure.spec.get("logs") or []]
    return tuple(dict.fromkeys(posixpath.normpath(c) for c in candidates if c.startswith("/")))


@dataclass(frozen=True)
class Pattern:
    """One argument pattern: a literal, a choice, literal text around one {placeholder}, or a choice of those."""

    choices: tuple[str, ...] = ()
    prefix: str = ""
    placeholder: str | None = None
    letters: str = ""
    suffix: str = ""
    alternatives: tuple[Pattern, ...] = ()

    def matches(self, arg: str, context: PolicyContext, policy: Policy) -> bool:
        if self.alternatives:
            return arg in self.choices or any(p.matches(arg, context, policy) for p in self.alternatives)
        if self.placeholder is None:
            return arg in self.choices
        if not (arg.startswith(self.prefix) and arg.endswith(self.suffix)) or len(arg) < len(self.prefix) + len(self.suffix):
            return False
        value = arg[len(self.prefix):len(arg) - len(self.suffix)]
        return PLACEHOLDERS[self.placeholder](value, self.letters, context, policy)


class Effect(StrEnum):
    """What a step does to the incident's service, for the rules that judge a plan as a whole."""

    STARTS = "starts"
    STOPS = "stops"
    REMOVES_LOGS = "removes_logs"


# what a step does, and to which of the incident's units
StepEffect = tuple[Effect, str]


@dataclass(frozen=True)
class PackagePath:
    """A directory of a service as its distribution package made it: the only owner, group and mode
    remediation may give back. ``tree``: everything below belongs to the same owner and group. A
    component of ``path`` may be a shell pattern (``/var/lib/postgresql/*/main``)."""

    services: tuple[str, ...]
    path: str
    owner: str
    group: str
    mode: int
    tree: bool = False

    def top_of(self, path: str) -> str | None:
        """The directory of this entry that ``path`` is, or is below when the entry is a tree."""
        pattern, parts = self.path.split("/"), path.split("/")
        if len(parts) < len(pattern) or (len(parts) > len(pattern) and not self.tree):
            return None
        if not all(fnmatch.fnmatchcase(part, expected) for part, expected in zip(parts, pattern, strict=False)):
            return None
        return "/".join(parts[:len(pattern)])


@dataclass(frozen=True)
class Rule:
    id: str
    description: str
    executables: tuple[str, ...]
    services: tuple[str, ...]
    decision: Decision
    become: bool
    argv: tuple[Pattern, ...] | None = None
    options: Mapping[str, Pattern | None] | None = None
    operands: tuple[Pattern, ...] = ()
    variadic: bool = False
    requires: frozenset[str] = frozenset()
    any_argument: Pattern | None = None
    allow_globs: bool = False
    allow_braces: bool = False
    restores: str | None = None
    effect: Effect | Mapping[str, Effect] | None = None
    # it only reads (state, files, sockets): the think loop may run it at once when the planner asks to look
    read_only: bool = False

    def applies(self, executable: str, context: PolicyContext) -> bool:
        if self.services and not {context.service, context.init_service} & set(self.services):
            return False
        return ANY_EXECUTABLE in self.executables or executable in self.executables

    def matches(self, args: Sequence[str], context: PolicyContext, policy: Policy) -> bool:
        if self.any_argument is not None:
            return any(self.any_argument.matches(value, context, policy) for value in _argument_values(args))
        if self.argv is not None:
            return len(self.argv) == len(args) and all(p.matches(a, context, policy) for p, a in zip(self.argv, args, strict=True))
        parsed = _split_options(args, self.options or {}, context, policy)
        if parsed is None:
            return False
        operands, seen_options = parsed
        if not self.requires <= set(seen_options):
            return False
        if not self.variadic:
            matched = len(operands) == len(self.operands) and all(
                p.matches(a, context, policy) for p, a in zip(self.operands, operands, strict=True))
        else:
            *fixed, repeated = self.operands
            patterns = fixed + [repeated] * (len(operands) - len(fixed))
            matched = len(operands) >= len(fixed) and all(p.matches(a, context, policy) for p, a in zip(patterns, operands, strict=True))
        return matched and (self.restores is None or RESTORES[self.restores](operands, seen_options, context, policy))

    def effect_of(self, args: Sequence[str]) -> Effect | None:
        if self.effect is None or isinstance(self.effect, Effect):
            return self.effect
        return next((self.effect[arg] for arg in args if arg in self.effect), None)


@dataclass(frozen=True)
class BlockedGroup:
    reason: str
    patterns: tuple[str, ...]


@dataclass(frozen=True)
class Policy:
    version: str
    source: str
    max_command_length: int
    protected_processes: frozenset[str]
    protected_services: frozenset[str]
    protected_paths: tuple[str, ...]
    secret_paths: tuple[str, ...]
    blocked: tuple[BlockedGroup, ...]
    rules: tuple[Rule, ...]
    path_symlinks: Mapping[str, str] = field(default_factory=dict)
    not_secret: frozenset[str] = frozenset()
    system_reads: tuple[str, ...] = ()
    package_paths: tuple[PackagePath, ...] = ()
    _by_executable: dict[str, tuple[Rule, ...]] = field(default_factory=dict, compare=False, repr=False)
    _blocked_by_executable: dict[str, str | None] = field(default_factory=dict, compare=False, repr=False)
    # derived from the fields above once, when the policy is made
    paths: PathResolver = field(init=False, compare=False, repr=False)
    _secret: re.Pattern[str] = field(init=False, compare=False, repr=False)
    _not_secret: re.Pattern[str] = field(init=False, compare=False, repr=False)
    _system_read: re.Pattern[str] = field(init=False, compare=False, repr=False)
    _protected: re.Pattern[str] = field(init=False, compare=False, repr=False)

    def __post_init__(self) -> None:
        # Exact protected paths are system directories, and the symlinks' targets real ones: owned by root, so
        # `..` may climb out of them.
        exact = {p for p in self.protected_paths if not GLOB_CHARACTERS.intersection(p)}
        real = frozenset(exact | set(self.path_symlinks.values())) - set(self.path_symlinks)
        object.__setattr__(self, "paths", PathResolver(symlinks=dict(self.path_symlinks), real_directories=real))
        object.__setattr__(self, "_secret", compile_patterns(self.secret_paths, below=True))
        object.__setattr__(self, "_not_secret", compile_patterns(self.not_secret, below=False, within_component=True))
        object.__setattr__(self, "_system_read", compile_patterns(self.system_reads, below=False, within_component=True))
        object.__setattr__(self, "_protected", compile_patterns(self.protected_paths, below=False))

    def rules_for(self, executable: str) -> tuple[Rule, ...]:
        """The rules that name this executable (or every executable), in file order; memoized."""
        rules = self._by_executable.get(executable)
        if rules is None:
            rules = tuple(r for r in self.rules if ANY_EXECUTABLE in r.executables or executable in r.executables)
            self._by_executable[executable] = rules
        return rules

    def blocked_reason(self, executable: str) -> str | None:
        if executable not in self._blocked_by_executable:
            self._blocked_by_executable[executable] = next(
                (group.reason for group in self.blocked if any(fnmatch.fnmatchcase(executable, p) for p in group.patterns)), None,
            )
        return self._blocked_by_executable[executable]

    def is_secret(self, arg: str) -> bool:
        """Whether any path ``arg`` may denote is a secret or below one (a secret directory covers everything in it).
        A path that climbs with ``..`` and lands anywhere in /proc is one too: through /proc's magic links a climb can
        lead anywhere, and no remediation needs it."""
        readings = self.paths.readings(arg)
        if ".." in arg.split("/") and any(path == "/proc" or path.startswith("/proc/") for path in readings):
            return True
        return any(self._secret.match(path) and not self._excepted(path) for path in readings)

    def _excepted(self, path: str) -> bool:
        """An exception of ``not_secret`` names files, never what is below them, and never a file named like a key."""
        return bool(self._not_secret.match(path)) and not _NAMED_LIKE_A_KEY.search(posixpath.basename(path))

    def is_system_read(self, path: str) -> bool:
        """Whether a canonical path is system state that any incident's read may print (``system_reads``)."""
        return bool(self._system_read.match(path))

    def is_protected(self, arg: str) -> bool:
        """Whether any path ``arg`` may denote is a protected system path."""
        return any(self._protected.match(path) for path in self.paths.readings(arg))

    @property
    def read_only_rules(self) -> frozenset[str]:
        """The ids of the rules marked ``read_only``: what they allow only reads."""
        return frozenset(rule.id for rule in self.rules if rule.read_only)

    def package_path(self, path: str, context: PolicyContext) -> tuple[str, PackagePath] | None:
        """The package's directory and entry for a canonical path of the incident's service: the first
        entry that names the path itself, or a tree the path is in."""
        names = {context.service, context.init_service}
        for entry in self.package_paths:
            top = entry.top_of(path) if names & set(entry.services) else None
            if top is not None:
                return top, entry
        return None


def evaluate(command: Any, context: PolicyContext | None = None, policy: Policy | None = None) -> Verdict:
    """Decide one command string, as a one-step plan. Never raises for hostile input: the worst input
    gets BLOCK. Raises PolicyEngineUnavailable when the bash grammar that cross-checks every command
    is not installed."""
    policy = policy or load_policy()
    context = context or PolicyContext()
    [verdict], _decision = _judge_plan([_judge_command(command, context, policy)], context)
    return verdict


def evaluate_argv(argv: Sequence[str], context: PolicyContext, policy: Policy, *, command: str | None = None) -> Verdict:
    """Decide an already split command (the form plans and approvals carry), as a one-step plan."""
    [verdict], _decision = _judge_plan([_judge_argv(argv, context, policy, command=command)], context)
    return verdict


def evaluate_plan(steps: Sequence[Any], context: PolicyContext | None = None, policy: Policy | None = None) -> tuple[list[Verdict], Decision]:
    """Judge a plan: each step (a command string, or an argv as plans carry them) by the rules, then the
    plan as a whole: a plan whose net effect leaves the incident's service stopped needs a human, and
    so does any step that removes or empties the service's logs. Returns the verdicts and the strictest
    decision. The heal loop, approvals and ``policy_check`` all judge through here."""
    policy = policy or load_policy()
    context = context or PolicyContext()
    judged = [_judge_argv(step, context, policy) if isinstance(step, (list, tuple)) else _judge_command(step, context, policy)
              for step in steps]
    return _judge_plan(judged, context)


def _judge_plan(judged: Sequence[tuple[Verdict, StepEffect | None]], context: PolicyContext) -> tuple[list[Verdict], Decision]:
    """The plan as a whole, unit by unit: a stop is undone only by a start of the same unit (or of the init service,
    which starts the unit it fronts), so stopping one instance and starting another leaves the first stopped."""
    verdicts = [verdict for verdict, _effect in judged]
    service = context.service or "the service"
    stopped: dict[str, int] = {}
    for index, (verdict, step_effect) in enumerate(judged):
        effect, target = step_effect or (None, "")
        if effect is Effect.STOPS:
            stopped[target] = index
        elif effect is Effect.STARTS:
            stopped.pop(target, None)
            if target == context.init_service and context.unit:
                stopped.pop(context.unit, None)
        elif effect is Effect.REMOVES_LOGS and verdict.decision is Decision.ALLOW:
            verdicts[index] = dataclasses.replace(
                verdict, decision=Decision.APPROVE, rule="plan-removes-logs",
                reason=f"removes or empties logs of {service} ({verdict.rule}: {verdict.reason}); a person decides what evidence goes")
    for unit, index in stopped.items():
        if verdicts[index].decision is Decision.ALLOW:
            stop = verdicts[index]
            verdicts[index] = dataclasses.replace(
                stop, decision=Decision.APPROVE, rule="plan-leaves-service-stopped",
                reason=f"the plan leaves {unit} of {service} stopped (nothing starts that unit after this step; {stop.rule}); "
                       "a person decides that")
    return verdicts, Decision.strictest([v.decision for v in verdicts])


def _effect_target(executable: str, args: Sequence[str], context: PolicyContext) -> str:
    """The unit a step starts or stops: the one it names, a PostgreSQL cluster's instance, or, for a signal to the
    service's processes, the unit that runs them."""
    if executable == "pg_ctlcluster" and len(args) >= 2:
        return f"{context.init_service}@{args[0]}-{args[1]}"
    named = next((_unit_name(arg) for arg in args if _own_unit(arg, context)), None)
    return named or context.unit or context.init_service or ""


def _judge_command(command: Any, context: PolicyContext, policy: Policy) -> tuple[Verdict, StepEffect | None]:
    if not isinstance(command, str):
        return _verdict(repr(command), (), Decision.BLOCK, "a command must be a string", "input", policy), None
    if len(command) > policy.max_command_length:
        return _verdict(command, (), Decision.BLOCK, f"longer than {policy.max_command_length} characters", "length", policy), None
    refused = _refused_character(command)
    if refused:
        return _verdict(command, (), Decision.BLOCK, refused, "charset", policy), None
    syntax = SHELL_SYNTAX.intersection(command)
    if syntax - QUOTABLE_CHARACTERS or (syntax and not _quoted_only(command)):
        return _verdict(command, (), Decision.BLOCK, _syntax_reason(syntax), "shell-syntax", policy), None
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        return _verdict(command, (), Decision.BLOCK, f"cannot be split into arguments: {exc}", "shell-syntax", policy), None
    return _judge_argv(argv, context, policy, command=command)


def _judge_argv(argv: Sequence[str], context: PolicyContext, policy: Policy, *, command: str | None = None) -> tuple[Verdict, StepEffect | None]:
    """Every argument passes the same character checks as a command string, and bash's grammar must
    read ``command`` (by default the argv as approvers see it, shell-quoted) as exactly this argv."""
    argv = tuple(argv)
    if command is None:
        command = shlex.join(argv) if all(isinstance(a, str) for a in argv) else repr(argv)
    if not argv or not all(isinstance(a, str) for a in argv):
        return _verdict(command, (), Decision.BLOCK, "a command needs an executable and string arguments", "input", policy), None
    if sum(len(a) + 1 for a in argv) > policy.max_command_length:
        return _verdict(command, argv, Decision.BLOCK, f"longer than {policy.max_command_length} characters", "length", policy), None
    for arg in argv:
        refused = _refused_character(arg) or ("" if arg else "an empty argument")
        if refused:
            return _verdict(command, argv, Decision.BLOCK, refused, "charset", policy), None
    globbed = any(GLOB_CHARACTERS.intersection(arg) for arg in argv)
    braced = any(BRACE_CHARACTERS.intersection(arg) for arg in argv)
    syntax = set().union(*(SHELL_SYNTAX.intersection(arg) for arg in argv)) - QUOTABLE_CHARACTERS
    if syntax:
        return _verdict(command, argv, Decision.BLOCK, _syntax_reason(syntax), "shell-syntax", policy), None
    read_by_bash = bash_words(command)
    if read_by_bash != argv:
        bash_reading = "not one simple command of literal words" if read_by_bash is None else f"the words {list(read_by_bash)}"
        return _verdict(command, argv, Decision.BLOCK, f"bash's grammar reads {bash_reading}, shlex {list(argv)}", "bash-grammar", policy), None
    if argv[0] == "sudo":
        if len(argv) == 1 or argv[1].startswith("-"):
            reason = "sudo with options or without a command (the executor decides privilege)"
            return _verdict(command, argv, Decision.BLOCK, reason, "sudo", policy), None
        argv = argv[1:]
    executable = argv[0]
    if "/" in executable:
        canonical = policy.paths.canonical(executable)
        directory, name = posixpath.split(canonical or "")
        if canonical is None or directory not in TRUSTED_BIN_DIRS:
            reason = f"executable {executable!r} is outside the system bin directories"
            return _verdict(command, argv, Decision.APPROVE, reason, "untrusted-path", policy), None
        executable = name
    blocked_reason = policy.blocked_reason(executable)
    if blocked_reason:
        return _verdict(command, argv, Decision.BLOCK, f"{executable}: {blocked_reason}", "blocked-executable", policy), None
    args = argv[1:]
    for rule in policy.rules_for(executable):
        quoted_syntax_refused = (globbed and not rule.allow_globs) or (braced and not rule.allow_braces)
        if (quoted_syntax_refused and rule.decision is not Decision.BLOCK) or not rule.applies(executable, context):
            continue
        if rule.matches(args, context, policy):
            effect = rule.effect_of(args)
            verdict = _verdict(command, argv, rule.decision, rule.description, rule.id, policy, rule.become)
            return verdict, None if effect is None else (effect, _effect_target(executable, args, context))
    if globbed or braced:
        reason = "glob characters or braces where no rule of the policy accepts them"
        return _verdict(command, argv, Decision.BLOCK, reason, "shell-syntax", policy), None
    # What a human approves without a rule runs as root, like remediation does; a rule can say otherwise.
    return _verdict(command, argv, Decision.APPROVE, f"no rule of the policy covers {executable} with these arguments",
                    "default-approve", policy, become=True), None


def _verdict(command: str, argv: tuple[str, ...], decision: Decision, reason: str, rule: str, policy: Policy, become: bool = False) -> Verdict:
    return Verdict(command=command, argv=argv, decision=decision, reason=reason, rule=rule, become=become, policy_version=policy.version)


def _refused_character(text: str) -> str:
    for position, char in enumerate(text):
        if not " " <= char <= "~":
            return f"character U+{ord(char):04X} at position {position} is not printable ASCII"
    return ""


def _syntax_reason(characters: Iterable[str]) -> str:
    return f"shell syntax {''.join(sorted(characters))!r} (commands never run through a shell)"


def _quoted_only(command: str) -> bool:
    """Glob characters and braces are tolerated only inside quotes, where a shell would not expand them either."""
    quote = ""
    for char in command:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in QUOTABLE_CHARACTERS:
            return False
    return True


def _argument_values(args: Sequence[str]) -> Iterable[str]:
    """Each argument, plus what an option carries attached (--file=/x, -o/x, -w@x), as a hard deny must see them."""
    for arg in args:
        yield arg
        if arg.startswith("-"):
            if "=" in arg:
                yield arg.split("=", 1)[1]
            for marker in "/@.":
                if marker in arg[1:]:
                    yield arg[arg.index(marker, 1):]


def _split_options(args: Sequence[str], options: Mapping[str, Pattern | None], context: PolicyContext,
                   policy: Policy) -> tuple[list[str], dict[str, str]] | None:
    """Consume the options a rule knows, getopt-style (GNU: options may follow operands); returns the
    operands and the options seen with their values ("" for a flag), or None when an option is
    unknown or its value does not match."""
    operands: list[str] = []
    seen: dict[str, str] = {}
    index = 0
    while index < len(args):
        arg = args[index]
        index += 1
        if arg == "--":
            operands.extend(args[index:])
            break
        if not arg.startswith("-") or arg == "-":
            operands.append(arg)
            continue
        if arg in options or arg.startswith("--"):
            name, _equals, attached = arg.partition("=") if arg.startswith("--") else (arg, "", "")
            if name not in options:
                return None
            value_pattern = options[name]
            if value_pattern is None:
                if _equals:
                    return None
                seen[name] = ""
                continue
            if not _equals:
                if index >= len(args):
                    return None
                attached = args[index]
                index += 1
            if not value_pattern.matches(attached, context, policy):
                return None
            seen[name] = attached
            continue
        cluster = _short_cluster(arg[1:], args[index] if index < len(args) else None, options, context, policy)
        if cluster is None:
            return None
        seen.update(cluster[0])
        index += cluster[1]
    return operands, seen


def _short_cluster(letters: str, following: str | None, options: Mapping[str, Pattern | None], context: PolicyContext,
                   policy: Policy) -> tuple[dict[str, str], int] | None:
    """-ltn (flags without values) ending, optionally, in one option with its value, attached (-bn1) or, as
    getopt reads it, the next argument (-xeu nginx); returns the options seen and how many arguments
    after the cluster it used (0 or 1)."""
    seen = {}
    for position, letter in enumerate(letters):
        name = f"-{letter}"
        if name not in options:
            return None
        pattern = options[name]
        if pattern is not None:
            rest = letters[position + 1:]
            value, used = (rest, 0) if rest else (following, 1)
            if value is None or not pattern.matches(value, context, policy):
                return None
            seen[name] = value
            return seen, used
        seen[name] = ""
    return seen, 0


def _is_canonical_int(arg: str) -> bool:
    return bool(_CANONICAL_INT.match(arg))


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _protected_pids(context: PolicyContext, policy: Policy) -> frozenset[int]:
    """Pids service_check saw that belong to a protected process: port owners by name, and the
    service's own processes when the service itself is protected (sshd's listener in an ssh incident)."""
    pids = {pid for pid, name in context.port_owners.items() if name in policy.protected_processes}
    own = {context.service, context.init_service, context.process} - {None}
    if own & (policy.protected_processes | policy.protected_services):
        pids |= context.service_pids
    return frozenset(pids)


def own_units(context: PolicyContext) -> frozenset[str]:
    """The units of the incident, without ``.service``: its init service, the unit service_check found running it,
    and the instances of the PostgreSQL clusters it declares (``postgresql@15-main``). Never another instance of a
    template: ``postgresql@14-main`` is another cluster, another incident."""
    if context.init_service is None:
        return frozenset()
    clusters = {f"{context.init_service}@{version}-{name}" for version, name in context.pg_clusters}
    return frozenset({context.init_service, *([context.unit] if context.unit else []), *clusters})


def _unit_name(arg: str) -> str:
    return arg.removesuffix(".service")


def _own_unit(arg: str, context: PolicyContext) -> bool:
    name = _unit_name(arg)
    return ("@" not in name or bool(_UNIT_INSTANCE.match(arg))) and name in own_units(context)


def _own_pids(context: PolicyContext) -> frozenset[int]:
    """The service's own processes: those service_check saw running it, and the port owners that carry its
    process name (an orphaned server its init script lost). Signalling them stops the service."""
    names = {context.process, (context.process or "")[:15]} - {None, ""}
    return context.service_pids | {pid for pid, name in context.port_owners.items() if name in names}


def _pid_placeholder(pids: Callable[[PolicyContext, Policy], Iterable[int]]) -> Callable[[str, str, PolicyContext, Policy], bool]:
    def match(arg: str, letters: str, context: PolicyContext, policy: Policy) -> bool:
        if not _is_canonical_int(arg) or int(arg) <= 1:
            return False
        pid = int(arg)
        return pid in set(pids(context, policy)) and pid not in _protected_pids(context, policy)
    return match


def _path_placeholder(accept: Callable[[str, PolicyContext, Policy], bool]) -> Callable[[str, str, PolicyContext, Policy], bool]:
    """A path that has one canonical form, none of whose readings is a secret, accepted by ``accept``."""
    def match(arg: str, letters: str, context: PolicyContext, policy: Policy) -> bool:
        path = policy.paths.canonical(arg)
        return path is not None and not policy.is_secret(arg) and accept(path, context, policy)
    return match


def _own_dirs(directories: Iterable[str], policy: Policy) -> Iterator[str]:
    """The service's directories that are its own: never a shared system directory such as /var/log
    (a declared /var/log/auth.log does not make /var/log the service's), nor one with no canonical form."""
    for directory in directories:
        path = policy.paths.canonical(directory)
        if path is not None and not policy.is_protected(path):
            yield path


def _service_dir(path: str, context: PolicyContext, policy: Policy) -> bool:
    return not policy.is_protected(path) and any(_under(path, d) for d in _own_dirs(context.service_dirs, policy))


def _service_file(path: str, context: PolicyContext, policy: Policy) -> bool:
    return not policy.is_protected(path) and any(path.startswith(d + "/") for d in _own_dirs(context.service_dirs, policy))


def _service_log_file(path: str, context: PolicyContext, policy: Policy) -> bool:
    return not policy.is_protected(path) and any(path.startswith(d + "/") for d in _own_dirs(context.log_dirs, policy))


def _runtime_dir(path: str, context: PolicyContext, policy: Policy) -> bool:
    names = {context.service, context.init_service} - {None}
    return any(_under(path, f"/run/{name}") for name in names)


def _service_url(arg: str, letters: str, context: PolicyContext, policy: Policy) -> bool:
    match = _LOOPBACK_URL.match(arg)
    return match is not None and _url_port(match) in context.http_ports


def _probe_host(arg: str, letters: str, context: PolicyContext, policy: Policy) -> bool:
    return arg in LOOPBACK_HOSTS or arg in context.probe_hosts


def _readable(path: str, context: PolicyContext, policy: Policy) -> bool:
    return True


def _holds_data(directory: str) -> bool:
    """A directory of the service's data (its state, caches, what it stores): dumps, write-ahead logs and core files,
    printed, are what the service keeps; a read names its declared files there, never the rest."""
    return any(_under(directory, area) for area in DATA_AREAS)


def _incident_file(path: str, context: PolicyContext, policy: Policy) -> bool:
    """A file a read of this incident may print: system state, or the service's own (below its own directories but
    those of its data, or its configuration directory, or one of its own files), where no link its account planted
    could lead the read (run as root) elsewhere."""
    if policy.is_system_read(path):
        return True
    return _own_file(path, context, policy) and not _may_be_a_planted_link(path, context, policy)


def _may_be_a_planted_link(path: str, context: PolicyContext, policy: Policy) -> bool:
    """Whether ``path`` lies in a directory service_check saw owned by another account than root, which could have
    put a link there, and service_check did not see the path itself as a file (a declared log it looked at)."""
    owners = _seen_owners(context, policy)
    parent = posixpath.dirname(path)
    while parent != "/":
        if owners.get(parent, "root") != "root":
            return owners.get(path) in (None, "(link)")
        parent = posixpath.dirname(parent)
    return False


def _own_file(path: str, context: PolicyContext, policy: Policy) -> bool:
    """Below the service's configuration directory or its own directories but those of its data, a state file of its
    own processes in /proc, or one of its own files (declared, its unit's, named for it, its packages' in /etc)."""
    names = {context.service, context.init_service} - {None}
    configuration = [policy.paths.canonical(f"/etc/{name}") for name in names]
    if any(directory and path.startswith(directory + "/") for directory in configuration):
        return True
    if any(_under(path, directory) for directory in _own_dirs(context.service_dirs, policy) if not _holds_data(directory)):
        return True
    process_file = _PROCESS_STATE_FILE.match(path)
    if process_file and int(process_file.group(1)) in _own_pids(context):
        return True
    return path in {policy.paths.canonical(own) for own in (*context.own_files, *context.log_files, context.stale_pidfile or "")}


# ---- owner and mode as the package set them -------------------------------------------------------------

def _entries(paths: Sequence[str], context: PolicyContext, policy: Policy, *, follows_last: bool = True
             ) -> list[tuple[str, bool, PackagePath]] | None:
    """For each path that no service account can redirect: its canonical form, whether it is a package directory
    itself (not below one), and its entry; None when one is not such a path."""
    found = []
    for arg in paths:
        path = policy.paths.canonical(arg)
        # x/ and x/. make the kernel resolve x as a directory: even chown -h follows a link there
        follows = follows_last or bool(_RESOLVES_LAST.search(arg))
        located = None if path is None or not _unredirectable(path, context, policy, follows) else policy.package_path(path, context)
        if path is None or located is None:
            return None
        found.append((path, located[0] == path, located[1]))
    return found


def _unredirectable(path: str, context: PolicyContext, policy: Policy, follows_last: bool) -> bool:
    """Whether every directory on the way to ``path`` is root's, so that no other account can put a symbolic link in
    place of the next component: a system directory (protected, a real directory), or one service_check saw owned by
    root. A step that does not follow the last component (chown -h or -R, without a trailing /) may reach it in a
    directory another account owns: a link there is changed itself, never what it leads to. Unknown means no: a
    person decides."""
    owners = _seen_owners(context, policy)
    parent = posixpath.dirname(path)
    if not follows_last and parent != "/":
        parent = posixpath.dirname(parent)
    while parent != "/":
        if parent not in policy.paths.real_directories and owners.get(parent) != "root":
            return False
        parent = posixpath.dirname(parent)
    return True


def _seen_owners(context: PolicyContext, policy: Policy) -> dict[str, str]:
    """Who service_check saw owning each component on the way to the declared paths, by canonical path."""
    return {policy.paths.canonical(seen) or seen: owner for seen, owner in context.path_owners.items()}


def _crosses_no_mount(path: str, context: PolicyContext, policy: Policy) -> bool:
    """Whether no filesystem is mounted below ``path`` (a recursive repair would walk into it), as the host said."""
    if context.mounts is None:
        return False
    return not any(mount.startswith(path.rstrip("/") + "/") for mount in (policy.paths.canonical(seen) or seen for seen in context.mounts))


def _restores_ownership(operands: Sequence[str], options: Mapping[str, str], context: PolicyContext, policy: Policy) -> bool:
    """chown OWNER[:GROUP] PATH...: the package's owner and group, on its paths, none of which a service account can
    redirect; -R (which walks physically, never through a link) only where the package owns the whole tree and no
    filesystem is mounted below."""
    owner, colon, group = operands[0].partition(":")
    no_dereference = bool({"-R", "-h", "--no-dereference"} & set(options))
    entries = _entries(operands[1:], context, policy, follows_last=not no_dereference)
    if not entries or (colon and not group):
        return False
    recursive = "-R" in options
    return all(owner == entry.owner and (not group or group == entry.group)
               and (not recursive or (entry.tree and _crosses_no_mount(path, context, policy))) for path, _itself, entry in entries)


def _restores_mode(operands: Sequence[str], options: Mapping[str, str], context: PolicyContext, policy: Policy) -> bool:
    """chmod MODE PATH...: the package's mode, on a package directory itself."""
    entries = _entries(operands[1:], context, policy) or []
    return bool(entries) and all(itself and _mode(operands[0]) == entry.mode for _path, itself, entry in entries)


def _restores_directory(operands: Sequence[str], options: Mapping[str, str], context: PolicyContext, policy: Policy) -> bool:
    """install -d / mkdir: a package directory with the package's owner, group and mode (what the
    command leaves unsaid is root, root and 0755)."""
    entries = _entries(operands, context, policy) or []
    return bool(entries) and all(
        itself and options.get("-o", "root") == entry.owner and options.get("-g", "root") == entry.group
        and _mode(options.get("-m", "0755")) == entry.mode for _path, itself, entry in entries)


def _mode(text: str) -> int | None:
    return int(text, 8) if _OCTAL_MODE.match(text) else None


RESTORES: dict[str, Callable[[Sequence[str], Mapping[str, str], PolicyContext, Policy], bool]] = {
    "ownership": _restores_ownership,
    "mode": _restores_mode,
    "directory": _restores_directory,
}

PLACEHOLDERS: dict[str, Callable[[str, str, PolicyContext, Policy], bool]] = {
    "init_service": lambda arg, letters, context, policy: context.init_service is not None and arg == context.init_service,
    "process": lambda arg, letters, context, policy: context.process is not None and arg in (context.process, context.process[:15]),
    "port_owner_pid": _pid_placeholder(lambda c, p: set(c.port_owners) - _own_pids(c)),
    "service_pid": _pid_placeholder(lambda c, p: _own_pids(c)),
    "protected_pid": lambda arg, letters, context, policy: _is_canonical_int(arg.lstrip("-"))
    and int(arg.lstrip("-")) in _protected_pids(context, policy),
    "port": lambda arg, letters, context, policy: _is_canonical_int(arg) and int(arg) in context.ports,
    "stale_pidfile": _path_placeholder(lambda path, context, policy: context.stale_pidfile is not None
                                       and path == policy.paths.canonical(context.stale_pidfile)),
    "stale_socket": _path_placeholder(lambda path, context, policy: path in {policy.paths.canonical(p) for p in context.stale_sockets}),
    "stale_lock": _path_placeholder(lambda path, context, policy: path in {policy.paths.canonical(p) for p in context.stale_locks}),
    "log_file": _path_placeholder(lambda path, context, policy: path in {policy.paths.canonical(log) for log in context.log_files}),
    "service_dir": _path_placeholder(_service_dir),
    "service_file": _path_placeholder(_service_file),
    "service_log_file": _path_placeholder(_service_log_file),
    "rotated_log": _path_placeholder(lambda path, context, policy: _service_log_file(path, context, policy) and bool(_ROTATED_LOG.search(path))),
    "runtime_dir": _path_placeholder(_runtime_dir),
    "package_path": _path_placeholder(lambda path, context, policy: policy.package_path(path, context) is not None),
    "readable_file": _path_placeholder(_readable),
    "incident_file": _path_placeholder(_incident_file),
    "unit": lambda arg, letters, context, policy: _own_unit(arg, context),
    "signed_size": lambda arg, letters, context, policy: bool(_SIGNED_SIZE.match(arg)),
    "text": lambda arg, letters, context, policy: True,
    "count": lambda arg, letters, context, policy: _is_canonical_int(arg) and 1 <= int(arg) <= 100_000,
    "few": lambda arg, letters, context, policy: _is_canonical_int(arg) and 1 <= int(arg) <= 10,
    "signed_count": lambda arg, letters, context, policy: _is_canonical_int(arg.lstrip("+-")) and len(arg) - len(arg.lstrip("+-")) <= 1,
    "flags": lambda arg, letters, context, policy: len(arg) > 1 and arg[0] == "-" and set(arg[1:]) <= set(letters),
    "word": lambda arg, letters, context, policy: bool(_WORD.match(arg)),
    "name": lambda arg, letters, context, policy: bool(_NAME.match(arg)),
    "glob": lambda arg, letters, context, policy: bool(_GLOB.match(arg)),
    "sed_print": lambda arg, letters, context, policy: bool(_SED_PRINT.match(arg)),
    "curl_write_out": lambda arg, letters, context, policy: bool(_CURL_WRITE_OUT.match(arg)),
    "service_url": _service_url,
    "pg_version": lambda arg, letters, context, policy: arg in {version for version, _name in context.pg_clusters},
    "pg_cluster": lambda arg, letters, context, policy: arg in {name for _version, name in context.pg_clusters},
    "probe_host": _probe_host,
    "secret_path": lambda arg, letters, context, policy: policy.is_secret(arg),
    "protected_path": lambda arg, letters, context, policy: policy.is_protected(arg),
    "protected_process": lambda arg, letters, context, policy: arg in policy.protected_processes,
    "protected_service": lambda arg, letters, context, policy: arg.removesuffix(".service") in policy.protected_services,
}
_PLACEHOLDERS_WITH_LETTERS = frozenset({"flags"})


def load_policy(path: str | Path | None = None) -> Policy:
    """Load and validate a policy file (the shipped default when no path is given)."""
    resolved = Path(path).expanduser().resolve() if path else DEFAULT_POLICY_FILE
    try:
        stat = resolved.stat()
    except OSError as exc:
        raise PolicyFileError("cannot read the policy file", field="policy", value=str(resolved), hint=str(exc)) from exc
    return _load_policy_cached(str(resolved), stat.st_mtime_ns, stat.st_size)


@lru_cache(maxsize=8)
def _load_policy_cached(path: str, _mtime_ns: int, _size: int) -> Policy:
    raw = Path(path).read_bytes()
    data, lines = _parse_yaml(raw, path)
    base = None
    if path != str(DEFAULT_POLICY_FILE) and isinstance(data, dict) and data.get("include_default"):
        base = load_policy()
    return parse_policy(data, source=path, version=hashlib.sha256(raw).hexdigest()[:16], lines=lines, base=base)


def _parse_yaml(raw: bytes, path: str) -> tuple[Any, Callable[[str], int | None]]:
    try:
        data = yaml.load(raw, Loader=YAML_LOADER)
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise PolicyFileError(f"{path}: the policy file is not valid YAML", field="policy", value=path, hint=str(exc)) from exc

    def line_of(where: str) -> int | None:
        # composed only for an error message: a valid policy never pays for its nodes' positions
        return _line_of(yaml.compose(raw.decode("utf-8"), Loader=YAML_LOADER), where)

    return data, line_of


def _line_of(node: Any, where: str) -> int | None:
    """Line (1-based) of a key such as rules[3].argv[0] in the composed YAML, for error messages."""
    line = node.start_mark.line + 1 if node is not None else None
    for part in re.findall(r"[^.\[\]]+|\[\d+\]", where):
        if node is None:
            break
        if part.startswith("[") and isinstance(node, yaml.SequenceNode):
            index = int(part[1:-1])
            node = node.value[index] if index < len(node.value) else None
        elif isinstance(node, yaml.MappingNode):
            node = next((value for key, value in node.value if key.value == part), None)
        else:
            node = None
        if node is not None:
            line = node.start_mark.line + 1
    return line


def parse_policy(data: Any, *, source: str, version: str, lines: Callable[[str], int | None] = lambda where: None,
                 base: Policy | None = None) -> Policy:
    def fail(message: str, where: str, value: Any, hint: str | None = None) -> PolicyFileError:
        line = lines(where)
        location = f"{source}:{line}" if line else source
        return PolicyFileError(f"{location}: {message}", field=where, value=value, hint=hint)

    if not isinstance(data, dict):
        raise fail("the policy must be a mapping", "(top level)", type(data).__name__, f"see {DEFAULT_POLICY_FILE}")
    unknown = sorted(set(data) - _TOP_KEYS)
    if unknown:
        raise fail("unknown key", unknown[0], data[unknown[0]], f"known keys: {sorted(_TOP_KEYS)}")
    if data.get("version") != 1:
        raise fail("unsupported policy version", "version", data.get("version"), "use version: 1")
    max_length = data.get("max_command_length", base.max_command_length if base else 512)
    if not isinstance(max_length, int) or max_length < 16:
        raise fail("invalid length limit", "max_command_length", max_length, "a whole number of at least 16")

    def string_list(key: str) -> list[str]:
        value = data.get(key) or []
        if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
            raise fail("must be a list of strings", key, value)
        return value

    blocked = []
    for index, group in enumerate(data.get("blocked") or []):
        where = f"blocked[{index}]"
        if not isinstance(group, dict) or set(group) != {"reason", "executables"} or not isinstance(group["executables"], list):
            raise fail("a blocked group has exactly 'reason' (text) and 'executables' (list)", where, group)
        blocked.append(BlockedGroup(reason=str(group["reason"]), patterns=tuple(str(p) for p in group["executables"])))
    if not isinstance(data.get("rules") or [], list):
        raise fail("must be a list of rules", "rules", data.get("rules"))
    symlinks = data.get("path_symlinks") or {}
    if not isinstance(symlinks, dict):
        raise fail("'path_symlinks' maps a symlink to its target", "path_symlinks", symlinks, "for example /var/run: /run")
    broken = validate_symlinks(symlinks)
    if broken:
        raise fail(f"a symlink or target {broken}", "path_symlinks", symlinks)
    package_paths = [_parse_package_path(index, raw, fail) for index, raw in enumerate(data.get("package_paths") or [])]
    rules = [_parse_rule(index, raw, fail) for index, raw in enumerate(data.get("rules") or [])]
    seen: set[str] = set()
    for index, rule in enumerate(rules):
        if rule.id in seen:
            raise fail("duplicate rule id", f"rules[{index}].id", rule.id, "rule ids must be unique within a file")
        seen.add(rule.id)
    return Policy(
        version=version if base is None else hashlib.sha256(f"{base.version}+{version}".encode()).hexdigest()[:16],
        source=source,
        max_command_length=max_length,
        protected_processes=frozenset(string_list("protected_processes")) | (base.protected_processes if base else frozenset()),
        protected_services=frozenset(string_list("protected_services")) | (base.protected_services if base else frozenset()),
        protected_paths=tuple(string_list("protected_paths")) + (base.protected_paths if base else ()),
        secret_paths=tuple(string_list("secret_paths")) + (base.secret_paths if base else ()),
        blocked=tuple(blocked) + (base.blocked if base else ()),
        # Your rules come first, so they tighten or extend the default ones they precede.
        rules=tuple(rules) + (base.rules if base else ()),
        path_symlinks={**(base.path_symlinks if base else {}), **symlinks},
        not_secret=frozenset(string_list("not_secret")) | (base.not_secret if base else frozenset()),
        system_reads=tuple(string_list("system_reads")) + (base.system_reads if base else ()),
        package_paths=tuple(package_paths) + (base.package_paths if base else ()),
    )


def _parse_package_path(index: int, raw: Any, fail: Callable[..., PolicyFileError]) -> PackagePath:
    where = f"package_paths[{index}]"
    keys = {"services", "path", "owner", "group", "mode", "tree"}
    if not isinstance(raw, dict) or not {"services", "path", "owner", "group", "mode"} <= set(raw) or set(raw) - keys:
        raise fail("a package path has services, path, owner, group, mode and optionally tree", where, raw)
    services, path, mode = raw["services"], raw["path"], str(raw["mode"])
    if not isinstance(services, list) or not services or not all(isinstance(s, str) and s for s in services):
        raise fail("'services' must be a list of service names", f"{where}.services", services)
    if not isinstance(path, str) or not path.startswith("/") or posixpath.normpath(path) != path or path == "/":
        raise fail("'path' must be an absolute, normalised path below /", f"{where}.path", path)
    for key in ("owner", "group"):
        if not isinstance(raw[key], str) or not _NAME.match(raw[key]):
            raise fail(f"'{key}' must be an account or group name", f"{where}.{key}", raw[key])
    if _mode(mode) is None:
        raise fail("'mode' must be an octal mode written as a string", f"{where}.mode", raw["mode"], 'for example "0755"')
    if not isinstance(raw.get("tree", False), bool):
        raise fail("'tree' must be true or false", f"{where}.tree", raw.get("tree"))
    return PackagePath(services=tuple(services), path=path, owner=raw["owner"], group=raw["group"], mode=int(mode, 8),
                       tree=raw.get("tree", False))


def _parse_rule(index: int, raw: Any, fail: Callable[..., PolicyFileError]) -> Rule:
    where = f"rules[{index}]"
    if not isinstance(raw, dict):
        raise fail("a rule must be a mapping", where, raw)
    unknown = sorted(set(raw) - _RULE_KEYS)
    if unknown:
        raise fail("unknown key in a rule", f"{where}.{unknown[0]}", raw[unknown[0]], f"known keys: {sorted(_RULE_KEYS)}")
    if not isinstance(raw.get("id"), str) or not raw["id"]:
        raise fail("a rule needs a non-empty 'id'", f"{where}.id", raw.get("id"))
    executables = raw.get("executable")
    executables = [executables] if isinstance(executables, str) else executables
    if not isinstance(executables, list) or not executables or not all(isinstance(e, str) and e for e in executables):
        raise fail("'executable' is a name or a list of names", f"{where}.executable", raw.get("executable"))
    for executable in executables:
        if "/" in executable:
            raise fail("name the executable, not its path", f"{where}.executable", executable)
    try:
        decision = Decision(str(raw.get("decision")))
    except ValueError:
        raise fail("unknown decision", f"{where}.decision", raw.get("decision"), "allow, approve or block") from None
    for key in ("become", "allow_globs", "allow_braces", "read_only"):
        if not isinstance(raw.get(key, False), bool):
            raise fail(f"'{key}' must be true or false", f"{where}.{key}", raw.get(key))
    forms = [key for key in ("argv", "any_argument") if key in raw] + (["options/operands"] if {"options", "operands", "requires"} & set(raw) else [])
    if len(forms) != 1:
        raise fail("a rule matches arguments with exactly one of: argv, options/operands, any_argument", where, sorted(set(raw) & _RULE_KEYS))
    services = raw.get("services") or []
    if not isinstance(services, list) or not all(isinstance(s, str) for s in services):
        raise fail("'services' must be a list of service names", f"{where}.services", services)

    def pattern(key: str, value: Any) -> Pattern:
        return _parse_pattern(f"{where}.{key}", value, fail)

    effect = raw.get("effect")
    effects = [e.value for e in Effect]
    if effect is not None and not (effect in effects or (isinstance(effect, dict) and effect and set(map(str, effect.values())) <= set(effects))):
        raise fail("'effect' is one of the effects, or a map from an argument to one", f"{where}.effect", effect, f"effects: {effects}")
    restores = raw.get("restores")
    if restores is not None and (not isinstance(restores, str) or restores not in RESTORES or ("options" not in raw and "operands" not in raw)):
        raise fail("'restores' checks options/operands against the package paths", f"{where}.restores", restores,
                   f"one of {sorted(RESTORES)}, with options/operands")
    if raw.get("read_only") and (effect is not None or restores is not None):
        raise fail("a read-only rule changes nothing: it has no 'effect' and no 'restores'", f"{where}.read_only", True)
    common: dict[str, Any] = dict(
        id=raw["id"], description=str(raw.get("description") or raw["id"]), executables=tuple(executables),
        services=tuple(services), decision=decision, become=raw.get("become", False), allow_globs=raw.get("allow_globs", False),
        allow_braces=raw.get("allow_braces", False), read_only=raw.get("read_only", False),
        effect=None if effect is None else Effect(effect) if isinstance(effect, str) else {str(k): Effect(v) for k, v in effect.items()},
    )
    if "any_argument" in raw:
        return Rule(any_argument=pattern("any_argument", raw["any_argument"]), **common)
    if "argv" in raw:
        if not isinstance(raw["argv"], list):
            raise fail("'argv' must be a list of argument patterns", f"{where}.argv", raw["argv"])
        return Rule(argv=tuple(pattern(f"argv[{i}]", p) for i, p in enumerate(raw["argv"])), **common)
    options = raw.get("options") or {}
    if not isinstance(options, dict) or not all(isinstance(k, str) and k.startswith("-") for k in options):
        raise fail("'options' maps each option (-x or --long) to the pattern of its value, or null", f"{where}.options", options)
    operands = list(raw.get("operands") or [])
    variadic = bool(operands) and operands[-1] == "..."
    if variadic:
        operands.pop()
        if not operands:
            raise fail("'...' repeats the operand before it (zero or more times) and cannot stand alone", f"{where}.operands", raw.get("operands"))
    requires = raw.get("requires") or []
    if not isinstance(requires, list) or not set(requires) <= set(options):
        raise fail("'requires' lists options of the rule that must be present", f"{where}.requires", requires)
    return Rule(
        restores=restores,
        options={name: None if value is None else pattern(f"options.{name}", value) for name, value in options.items()},
        operands=tuple(pattern(f"operands[{i}]", p) for i, p in enumerate(operands)),
        variadic=variadic,
        requires=frozenset(requires),
        **common,
    )


def _parse_pattern(where: str, value: Any, fail: Callable[..., PolicyFileError]) -> Pattern:
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        templated = [v for v in value if _PLACEHOLDER.search(v)]
        if not templated:
            return Pattern(choices=tuple(value))
        return Pattern(choices=tuple(v for v in value if v not in templated),
                       alternatives=tuple(_parse_pattern(f"{where}[{value.index(v)}]", v, fail) for v in templated))
    if not isinstance(value, str):
        raise fail("an argument pattern is a string or a list of strings", where, value)
    found = list(_PLACEHOLDER.finditer(value))
    if not found:
        return Pattern(choices=(value,))
    if len(found) > 1:
        raise fail("at most one placeholder per argument pattern", where, value)
    placeholder = found[0]
    name, letters = placeholder.group(1), placeholder.group(2) or ""
    if name not in PLACEHOLDERS or bool(letters) != (name in _PLACEHOLDERS_WITH_LETTERS):
        raise fail("unknown placeholder", where, value, f"known: {sorted(PLACEHOLDERS)} ({{flags:LETTERS}} takes letters)")
    return Pattern(prefix=value[:placeholder.start()], placeholder=name, letters=letters, suffix=value[placeholder.end():])
