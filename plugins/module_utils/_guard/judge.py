"""The argv judge: decides ALLOW / APPROVE / BLOCK for each step of a plan, against the incident's context.

One implementation for both sides: the controller's guard judges plans with it, and the executor on each host judges
every step again with it, in a context it gathered itself (stdlib only, for the targets' Python). Parse, don't
pattern-match: every argument passes the character checks, then hard denies by executable, then the first rule of the
executable whose arguments match. Anything the policy does not understand is APPROVE; nothing is allowed by default.

One room of about 900 lines, on purpose: the rule types, the placeholders that bind an argument to the incident and
the repairs they check are one vocabulary that refers to itself (a rule matches through placeholders that ask the
policy, whose rules match through placeholders), and split they would import each other. What the judge reads and
does not decide lives beside it: the rule language (``policy_language``), the incident's context (``context``) and
the reading of paths (``paths``).
"""

from __future__ import annotations

import dataclasses
import fnmatch
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Callable, Iterable, Iterator, Mapping, Sequence, Tuple, Union

from ansible_collections.sentinel.heal.plugins.module_utils._guard.context import PackagePath, PolicyContext, url_port
from ansible_collections.sentinel.heal.plugins.module_utils._guard.paths import PathResolver, compile_patterns

try:
    from enum import StrEnum
except ImportError:  # a target's Python before 3.11
    class StrEnum(str, Enum):  # type: ignore[no-redef]
        __str__ = str.__str__
        __format__ = str.__format__  # type: ignore[assignment]


class Decision(StrEnum):
    """What the guard says about a step. Ordered from the most to the least permissive."""

    ALLOW = "allow"
    APPROVE = "approve"
    BLOCK = "block"

    @property
    def strictness(self) -> int:
        return _STRICTNESS[self]

    @classmethod
    def strictest(cls, decisions: Sequence[Decision]) -> Decision:
        # An empty plan runs nothing, so nothing needs to be guarded.
        return max(decisions, key=lambda d: d.strictness, default=cls.ALLOW)


_STRICTNESS = {Decision.ALLOW: 0, Decision.APPROVE: 1, Decision.BLOCK: 2}


@dataclass(frozen=True)
class Verdict:
    """The guard's decision about one command."""

    command: str
    argv: tuple[str, ...]
    decision: Decision
    reason: str
    rule: str
    become: bool = False
    policy_version: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {
            "command": self.command,
            "argv": list(self.argv),
            "decision": self.decision.value,
            "reason": self.reason,
            "rule": self.rule,
            "become": self.become,
            "policy_version": self.policy_version,
        }


# Characters that mean something to a shell. The executor never uses a shell, so a command that
# contains them is either an attack or a plan that would not do what it says. Globs, braces and a
# backslash mean nothing inside quotes, so there a rule may accept them: the glob characters for
# arguments it matches with {glob} (find -name '*.gz'), braces and the backslash of a newline with
# {curl_write_out} (curl -w '%{http_code}\n', where curl, not a shell, reads the \n).
SHELL_SYNTAX = frozenset(";&|<>`$(){}*?[]\\!#~")
GLOB_CHARACTERS = frozenset("*?[]")
BRACE_CHARACTERS = frozenset("{}\\")
QUOTABLE_CHARACTERS = GLOB_CHARACTERS | BRACE_CHARACTERS
TRUSTED_BIN_DIRS = frozenset({"/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"})
ANY_EXECUTABLE = "*"
LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "ip6-localhost"})
# where services keep their data: a read of the incident's files names its declared ones there, nothing else
DATA_AREAS = ("/var/lib", "/var/cache", "/var/spool", "/srv", "/opt", "/home", "/var/backups")
_CANONICAL_INT = re.compile(r"^(0|[1-9][0-9]*)$")
_SED_PRINT = re.compile(r"^([1-9][0-9]*(,[1-9][0-9]*)?)?p$")
# curl -w text that prints only numbers curl measured: not @FILE (reads a file), %output{} (writes one), %header{},
# %{url}, %{json} or any other variable that carries what the server or the command said.
_CURL_WRITE_OUT = re.compile(
    r"^([A-Za-z0-9 :=,._/-]|\\n)*(%\{(http_code|response_code|http_connect|time_namelookup|time_connect|time_appconnect|time_pretransfer"
    r"|time_redirect|time_starttransfer|time_total|size_download|size_header|size_request|size_upload|speed_download|speed_upload"
    r"|num_connects|num_redirects|exitcode)\}([A-Za-z0-9 :=,._/-]|\\n)*)+$")
# What systemctl show -p may print of a unit: its state, its main process, its resources and limits, its files' and
# its dependencies' names. Never Environment=, the Exec*= command lines or the credentials, which may hold secrets.
UNIT_PROPERTIES = frozenset({
    "Id", "Names", "Description", "Type", "LoadState", "LoadError", "ActiveState", "SubState", "Result", "UnitFileState",
    "UnitFilePreset", "FragmentPath", "DropInPaths", "SourcePath", "MainPID", "ExecMainPID", "ExecMainCode", "ExecMainStatus",
    "ExecMainStartTimestamp", "ExecMainExitTimestamp", "NRestarts", "StatusText", "StatusErrno", "Restart", "RestartUSec",
    "RemainAfterExit", "StartLimitBurst", "StartLimitIntervalUSec", "StartLimitAction", "TimeoutStartUSec", "TimeoutStopUSec",
    "WatchdogUSec", "ActiveEnterTimestamp", "ActiveExitTimestamp", "InactiveEnterTimestamp", "InactiveExitTimestamp",
    "StateChangeTimestamp", "ConditionResult", "AssertResult", "User", "Group", "PIDFile", "WorkingDirectory",
    "RuntimeDirectory", "StateDirectory", "CacheDirectory", "LogsDirectory", "ConfigurationDirectory", "ControlGroup",
    "MemoryCurrent", "MemoryPeak", "MemoryHigh", "MemoryMax", "TasksCurrent", "TasksMax", "CPUUsageNSec", "LimitNOFILE",
    "LimitNOFILESoft", "LimitNPROC", "LimitNPROCSoft", "LimitCORE", "OOMPolicy", "OOMScoreAdjust", "KillMode", "KillSignal",
    "Requires", "Requisite", "Wants", "BindsTo", "PartOf", "ConsistsOf", "WantedBy", "RequiredBy", "Conflicts", "Before",
    "After",
})
# A value that starts with "-" becomes an option of the tool, or of one it wraps (service passes it to systemctl).
_WORD = re.compile(r"^[A-Za-z0-9@._+,:%=][A-Za-z0-9@._+,:%=-]*$")
_NAME = re.compile(r"^[A-Za-z0-9@._+][A-Za-z0-9@._+-]*$")
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


class Repair(StrEnum):
    """What a repair step leaves on one package directory, for the plan's end state (the judge's, never a policy's)."""

    MADE = "made"            # made root's with mode 0755, its package's owner, group and mode still to give
    OWNER = "owner"          # given its package's owner and group
    MODE = "mode"            # given its package's mode


# what a step does, and to which of the incident's units (or, for a repair, to which package directory)
StepEffect = Tuple[Union[Effect, Repair], str]


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
    # the last pattern of argv (or of operands) repeats zero or more times
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
            return self._in_order(self.argv, args, context, policy)
        parsed = split_options(args, self.options or {}, context, policy)
        if parsed is None:
            return False
        operands, seen_options = parsed
        if not self.requires <= set(seen_options):
            return False
        return self._in_order(self.operands, operands, context, policy) and (
            self.restores is None or RESTORES[self.restores](operands, seen_options, context, policy))

    def _in_order(self, patterns: tuple[Pattern, ...], args: Sequence[str], context: PolicyContext, policy: Policy) -> bool:
        """Each argument matches its pattern; with ``variadic`` the last pattern repeats zero or more times."""
        if not self.variadic:
            return len(args) == len(patterns) and all(p.matches(a, context, policy) for p, a in zip(patterns, args))
        *fixed, repeated = patterns
        return len(args) >= len(fixed) and all(p.matches(a, context, policy) for p, a in zip(fixed + [repeated] * (len(args) - len(fixed)), args))

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
    _blocked: tuple[tuple[str, re.Pattern[str]], ...] = field(init=False, compare=False, repr=False)

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
        object.__setattr__(self, "_blocked", tuple((group.reason, re.compile("|".join(map(fnmatch.translate, group.patterns))))
                                                   for group in self.blocked if group.patterns))

    def rules_for(self, executable: str) -> tuple[Rule, ...]:
        """The rules that name this executable (or every executable), in file order; memoized."""
        rules = self._by_executable.get(executable)
        if rules is None:
            rules = tuple(r for r in self.rules if ANY_EXECUTABLE in r.executables or executable in r.executables)
            self._by_executable[executable] = rules
        return rules

    def blocked_reason(self, executable: str) -> str | None:
        if executable not in self._blocked_by_executable:
            self._blocked_by_executable[executable] = next((reason for reason, patterns in self._blocked if patterns.match(executable)), None)
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
        """The directory and entry that say what a canonical path of the incident's service should be: the host's
        reading of the service's directories (``context.owned_dirs``, most specific first: the path itself, or a tree
        it is in), else the first entry of the policy's package_paths for the service that names the path or a tree it
        is in. A table entry below the host's tree (the path itself, where the host names only a tree above it) still
        speaks for its own path. A host's entry never names a protected path, nor one it wrote otherwise than the
        policy reads it."""
        host = next(((top, entry) for entry in context.owned_dirs for top in [entry.top_of(path)]
                     if top is not None and self.paths.canonical(entry.path) == entry.path and not self.is_protected(entry.path)), None)
        names = {context.service, context.init_service}
        table = next(((top, entry) for entry in self.package_paths if names & set(entry.services) for top in [entry.top_of(path)]
                      if top is not None), None)
        return table if host is None or (table is not None and table[0].count("/") > host[0].count("/")) else host


def judge_steps(steps: Sequence[Sequence[str]], context: PolicyContext, policy: Policy,
                words_of: Callable[[str], tuple[str, ...] | None] | None = None) -> tuple[list[Verdict], Decision]:
    """Judge a plan of argv steps, each by the rules and then the plan as a whole: the verdicts and the strictest
    decision. ``words_of``: a second, independent reading of each step's shell-quoted form (bash's grammar, on the
    controller), which must give the same argv."""
    return judge_plan([judge_argv(step, context, policy, words_of=words_of) for step in steps], context)


def judge_plan(judged: Sequence[tuple[Verdict, StepEffect | None]], context: PolicyContext) -> tuple[list[Verdict], Decision]:
    """The plan as a whole, unit by unit: a stop is undone only by a start of the same unit (or of the init service,
    which starts the unit it fronts), so stopping one instance and starting another leaves the first stopped. A package
    directory made root's ends as its package wants only when later steps give it the package's owner and group and
    its mode: the plan's end state is judged as the one repair it makes (install -d -o -g -m)."""
    verdicts = [verdict for verdict, _effect in judged]
    service = context.service or "the service"
    stopped: dict[str, int] = {}
    # each directory a step made root's, with what of its package's it still lacks
    unfinished: dict[str, tuple[int, set[Repair]]] = {}
    for index, (verdict, step_effect) in enumerate(judged):
        effect, target = step_effect or (None, "")
        if effect is Repair.MADE:
            unfinished[target] = (index, {Repair.OWNER, Repair.MODE})
        elif isinstance(effect, Repair) and target in unfinished:
            unfinished[target][1].discard(effect)
        elif effect is Effect.STOPS:
            stopped[target] = index
        elif effect is Effect.STARTS:
            stopped.pop(target, None)
            if target == context.init_service and context.unit:
                stopped.pop(context.unit, None)
        elif effect is Effect.REMOVES_LOGS and verdict.decision is Decision.ALLOW:
            verdicts[index] = dataclasses.replace(
                verdict, decision=Decision.APPROVE, rule="plan-removes-logs",
                reason=f"removes or empties logs of {service} ({verdict.rule}: {verdict.reason}); a person decides what evidence goes")
    for path, (index, lacking) in unfinished.items():
        if lacking and verdicts[index].decision is Decision.ALLOW:
            made = verdicts[index]
            verdicts[index] = dataclasses.replace(
                made, decision=Decision.APPROVE, rule="plan-leaves-directory-unlike-its-package",
                reason=f"makes {path} root's with mode 0755, and no later step of the plan gives it its package's "
                       f"{' and '.join(text for repair, text in _LACKING.items() if repair in lacking)} ({made.rule}); a person decides that")
    for unit, index in stopped.items():
        if verdicts[index].decision is Decision.ALLOW:
            stop = verdicts[index]
            verdicts[index] = dataclasses.replace(
                stop, decision=Decision.APPROVE, rule="plan-leaves-service-stopped",
                reason=f"the plan leaves {unit} of {service} stopped (nothing starts that unit after this step; {stop.rule}); "
                       "a person decides that")
    return verdicts, Decision.strictest([v.decision for v in verdicts])


_LACKING = {Repair.OWNER: "owner and group (chown OWNER:GROUP)", Repair.MODE: "mode (chmod MODE)"}


def _repair_of(rule: Rule, args: Sequence[str], context: PolicyContext, policy: Policy) -> StepEffect | None:
    """What a repair step leaves on the one package directory it names, for the plan's end state: the package's owner
    and group (chown OWNER:GROUP), its mode (chmod), or the directory made root's for later steps to finish; None for
    any other step, and for a repair of several paths (a plan finishes a directory one path at a time)."""
    repair = _REPAIRS.get(rule.restores or "")
    parsed = None if repair is None else split_options(args, rule.options or {}, context, policy)
    if repair is None or parsed is None:
        return None
    operands, _options = parsed
    paths = operands if repair is Repair.MADE else operands[1:]
    if len(paths) != 1 or (repair is Repair.OWNER and not operands[0].partition(":")[2]):
        return None
    path = policy.paths.canonical(paths[0])
    return None if path is None else (repair, path)


def _effect_target(executable: str, args: Sequence[str], context: PolicyContext) -> str:
    """The unit a step starts or stops: the one it names, a PostgreSQL cluster's instance, or, for a signal to the
    service's processes, the unit that runs them."""
    if executable == "pg_ctlcluster" and len(args) >= 2:
        return f"{context.init_service}@{args[0]}-{args[1]}"
    named = next((_unit_name(arg) for arg in args if _own_unit(arg, context)), None)
    # an alias is the unit it names: stopping redis and starting redis-server leaves nothing stopped
    if named in context.unit_names:
        named = context.unit
    return named or context.unit or context.init_service or ""


def judge_argv(argv: Sequence[Any], context: PolicyContext, policy: Policy, *, command: str | None = None,
               words_of: Callable[[str], tuple[str, ...] | None] | None = None) -> tuple[Verdict, StepEffect | None]:
    """Every argument passes the same character checks as a command string, and ``words_of`` (bash's grammar, on the
    controller) must read ``command`` (by default the argv as approvers see it, shell-quoted) as exactly this argv."""
    argv = tuple(argv)
    if command is None:
        command = shlex.join(argv) if all(isinstance(a, str) for a in argv) else repr(argv)
    if not argv or not all(isinstance(a, str) for a in argv):
        return verdict(command, (), Decision.BLOCK, "a command needs an executable and string arguments", "input", policy), None
    if sum(len(a) + 1 for a in argv) > policy.max_command_length:
        return verdict(command, argv, Decision.BLOCK, f"longer than {policy.max_command_length} characters", "length", policy), None
    for arg in argv:
        refused = refused_character(arg) or ("" if arg else "an empty argument")
        if refused:
            return verdict(command, argv, Decision.BLOCK, refused, "charset", policy), None
    globbed = any(GLOB_CHARACTERS.intersection(arg) for arg in argv)
    braced = any(BRACE_CHARACTERS.intersection(arg) for arg in argv)
    syntax = set().union(*(SHELL_SYNTAX.intersection(arg) for arg in argv)) - QUOTABLE_CHARACTERS
    if syntax:
        return verdict(command, argv, Decision.BLOCK, syntax_reason(syntax), "shell-syntax", policy), None
    read_by_bash = argv if words_of is None else words_of(command)
    if read_by_bash != argv:
        bash_reading = "not one simple command of literal words" if read_by_bash is None else f"the words {list(read_by_bash)}"
        return verdict(command, argv, Decision.BLOCK, f"bash's grammar reads {bash_reading}, shlex {list(argv)}", "bash-grammar", policy), None
    if argv[0] == "sudo":
        if len(argv) == 1 or argv[1].startswith("-"):
            reason = "sudo with options or without a command (the executor decides privilege)"
            return verdict(command, argv, Decision.BLOCK, reason, "sudo", policy), None
        argv = argv[1:]
    executable = argv[0]
    if "/" in executable:
        canonical = policy.paths.canonical(executable)
        directory, name = posixpath.split(canonical or "")
        if canonical is None or directory not in TRUSTED_BIN_DIRS:
            reason = f"executable {executable!r} is outside the system bin directories"
            return verdict(command, argv, Decision.APPROVE, reason, "untrusted-path", policy), None
        executable = name
    blocked_reason = policy.blocked_reason(executable)
    if blocked_reason:
        return verdict(command, argv, Decision.BLOCK, f"{executable}: {blocked_reason}", "blocked-executable", policy), None
    args = argv[1:]
    for rule in policy.rules_for(executable):
        quoted_syntax_refused = (globbed and not rule.allow_globs) or (braced and not rule.allow_braces)
        if (quoted_syntax_refused and rule.decision is not Decision.BLOCK) or not rule.applies(executable, context):
            continue
        if rule.matches(args, context, policy):
            effect = rule.effect_of(args)
            judged = verdict(command, argv, rule.decision, rule.description, rule.id, policy, rule.become)
            return judged, _repair_of(rule, args, context, policy) if effect is None else (effect, _effect_target(executable, args, context))
    if globbed or braced:
        reason = "glob characters, braces or a backslash where no rule of the policy accepts them"
        return verdict(command, argv, Decision.BLOCK, reason, "shell-syntax", policy), None
    # What a human approves without a rule runs as root, like remediation does; a rule can say otherwise.
    return verdict(command, argv, Decision.APPROVE, f"no rule of the policy covers {executable} with these arguments",
                   "default-approve", policy, become=True), None


def verdict(command: str, argv: tuple[str, ...], decision: Decision, reason: str, rule: str, policy: Policy, become: bool = False) -> Verdict:
    return Verdict(command=command, argv=argv, decision=decision, reason=reason, rule=rule, become=become, policy_version=policy.version)


def refused_character(text: str) -> str:
    for position, char in enumerate(text):
        if not " " <= char <= "~":
            return f"character U+{ord(char):04X} at position {position} is not printable ASCII"
    return ""


def syntax_reason(characters: Iterable[str]) -> str:
    return f"shell syntax {''.join(sorted(characters))!r} (commands never run through a shell)"


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


def split_options(args: Sequence[str], options: Mapping[str, Pattern | None], context: PolicyContext,
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
    """Pids service_check saw that belong to a protected process: root's port owners outside the service's own units
    and pid file tree (dbus-broker, systemd-resolved, whatever their name), the port owners the policy's
    protected_processes name, and the service's own processes when the service itself is protected (sshd's listener
    in an ssh incident)."""
    pids = set(context.root_pids - context.service_pids)
    pids |= {pid for pid, name in context.port_owners.items() if name in policy.protected_processes}
    own = {context.service, context.init_service, context.process} - {None}
    if own & (policy.protected_processes | policy.protected_services):
        pids |= context.service_pids
    return frozenset(pids)


def own_units(context: PolicyContext) -> frozenset[str]:
    """The units of the incident, without ``.service``: its init service, the unit service_check found running it
    under every name systemd knows it by (its aliases: redis for redis-server), and the instances of the PostgreSQL
    clusters it declares (``postgresql@15-main``). Never another instance of a template: ``postgresql@14-main`` is
    another cluster, another incident."""
    if context.init_service is None:
        return frozenset()
    clusters = {f"{context.init_service}@{version}-{name}" for version, name in context.pg_clusters}
    return frozenset({context.init_service, *([context.unit] if context.unit else []), *context.unit_names, *clusters})


def _unit_name(arg: str) -> str:
    return arg[:-len(".service")] if arg.endswith(".service") else arg


def _own_unit(arg: str, context: PolicyContext) -> bool:
    name = _unit_name(arg)
    return ("@" not in name or bool(_UNIT_INSTANCE.match(arg))) and name in own_units(context)


def _own_pids(context: PolicyContext) -> frozenset[int]:
    """The service's own processes: those of its units or pid file tree, and the port owners on its port that run its
    program outside every service's unit (an orphaned server its init script lost), but never a process of another
    service, nor one that only carries its name. Signalling them stops the service."""
    return (context.service_pids | context.lost_pids) - set(context.other_service_pids)


def _squatters(context: PolicyContext) -> frozenset[int]:
    """The port owners that are no service's processes: neither the incident's own nor another service's (its systemd
    unit's, or another declared service's)."""
    return frozenset(context.port_owners) - _own_pids(context) - set(context.other_service_pids)


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
    return match is not None and url_port(match) in context.http_ports


def _service_data(arg: str, letters: str, context: PolicyContext, policy: Policy) -> bool:
    """A path in one of the incident's own data directories (in a data area: /var/lib/NAME, a declared path there),
    secrets included, for its size alone; never a dot file in it (an account's credentials, keys and histories)."""
    path = policy.paths.canonical(arg)
    if path is None or policy.is_protected(path):
        return False
    for directory in _own_dirs(context.service_dirs, policy):
        if _holds_data(directory) and _under(path, directory):
            return not any(part.startswith(".") for part in path[len(directory):].split("/"))
    return False


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
    put a link there, and service_check did not see the path itself as a file (a declared log it looked at). A
    directory of the service's own (its run, log and declared directories) whose owner the host did not report counts
    as its account's: that is whose such directories are, and the controller does not take root's on its own word."""
    owners = _seen_owners(context, policy)
    services = [*_own_dirs(context.service_dirs, policy), *_own_dirs(context.log_dirs, policy),
                *(f"/run/{name}" for name in {context.service, context.init_service} - {None})]
    parent = posixpath.dirname(path)
    while parent != "/":
        owner = owners.get(parent) or ("(unknown)" if any(_under(parent, directory) for directory in services) else "root")
        if owner != "root":
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
        safe = path is not None and (_repaired_without_following(arg, path, context) or _unredirectable(path, context, policy, follows))
        located = policy.package_path(path, context) if safe and path is not None else None
        if path is None or located is None:
            return None
        found.append((path, located[0] == path, located[1]))
    return found


def _repaired_without_following(arg: str, path: str, context: PolicyContext) -> bool:
    """Whether the host's executor does the repair of ``arg`` itself, never following a link at any component (a link
    is refused wherever it is met, so an account's directory on the way cannot redirect it): only a path it walks,
    absolute and normal, written as the policy reads it (it refuses x/, x/. and a link the policy resolves, /var/run)."""
    return context.repairs_without_following_links and arg == path


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
    return bool(entries) and all(itself and octal_mode(operands[0]) == entry.mode for _path, itself, entry in entries)


def _restores_directory(operands: Sequence[str], options: Mapping[str, str], context: PolicyContext, policy: Policy) -> bool:
    """install -d / mkdir: a package directory with the package's owner, group and mode (what the
    command leaves unsaid is root, root and 0755)."""
    entries = _entries(operands, context, policy) or []
    return bool(entries) and all(
        itself and options.get("-o", "root") == entry.owner and options.get("-g", "root") == entry.group
        and octal_mode(options.get("-m", "0755")) == entry.mode for _path, itself, entry in entries)


def _makes_directory_for_the_plan(operands: Sequence[str], options: Mapping[str, str], context: PolicyContext, policy: Policy) -> bool:
    """mkdir of a package directory itself, on a path no service account can redirect, left root's with mode 0755: the
    plan's later steps give it the package's owner, group and mode, or the plan waits for a person (judge_plan)."""
    entries = _entries(operands, context, policy) or []
    return bool(entries) and all(itself for _path, itself, _entry in entries)


def _restores_known_good(allowed: Callable[[PolicyContext], bool]) -> Callable[[Sequence[str], Mapping[str, str], PolicyContext, Policy], bool]:
    """sentinel-heal-restore FILE SHA256: a file of the incident that changed since the service last worked, and the
    hash of its last known good copy as the host recorded it, where ``allowed`` says the service's setting lets it."""
    def restores(operands: Sequence[str], options: Mapping[str, str], context: PolicyContext, policy: Policy) -> bool:
        if len(operands) != 2 or not allowed(context):
            return False
        copies = {policy.paths.canonical(path) or path: digest for path, digest in context.known_good_copies.items()}
        path = policy.paths.canonical(operands[0])
        return path is not None and path == operands[0] and copies.get(path) == operands[1]
    return restores


# the policy's ``restores`` of a last known good file (sentinel-heal-restore FILE SHA256), by what each binds: unattended
# (the service's restore_known_good is auto, and its configuration test checks the file as it goes back), approved by
# a person (approve, or auto where no configuration test can check it first), and a file that holds secrets (put back
# only with a person, whichever of the two the setting is)
KNOWN_GOOD_SETTINGS: dict[str, Callable[[PolicyContext], bool]] = {
    "known_good": lambda context: context.restore_known_good == "auto" and context.restore_tested,
    "known_good_with_a_person": lambda context: context.restore_known_good == "approve" or (
        context.restore_known_good == "auto" and not context.restore_tested),
    "known_good_holding_secrets": lambda context: context.restore_known_good in ("auto", "approve"),
}


# the restores whose step leaves a package directory part of the way to its package's owner, group and mode
_REPAIRS = {"ownership": Repair.OWNER, "mode": Repair.MODE, "directory_for_the_plan": Repair.MADE}


def octal_mode(text: str) -> int | None:
    return int(text, 8) if _OCTAL_MODE.match(text) else None


RESTORES: dict[str, Callable[[Sequence[str], Mapping[str, str], PolicyContext, Policy], bool]] = {
    "ownership": _restores_ownership,
    "mode": _restores_mode,
    "directory": _restores_directory,
    "directory_for_the_plan": _makes_directory_for_the_plan,
    **{restores: _restores_known_good(setting) for restores, setting in KNOWN_GOOD_SETTINGS.items()},
}

PLACEHOLDERS: dict[str, Callable[[str, str, PolicyContext, Policy], bool]] = {
    "init_service": lambda arg, letters, context, policy: context.init_service is not None and arg == context.init_service,
    "process": lambda arg, letters, context, policy: context.process is not None and arg in (context.process, context.process[:15]),
    "port_owner_pid": _pid_placeholder(lambda c, p: _squatters(c)),
    "other_service_pid": _pid_placeholder(lambda c, p: set(c.other_service_pids)),
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
    "cached_package": _path_placeholder(lambda path, context, policy: path in {policy.paths.canonical(p) for p in context.cached_packages}),
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
    "unit_properties": lambda arg, letters, context, policy: set(arg.split(",")) <= UNIT_PROPERTIES,
    "service_data": _service_data,
    "service_url": _service_url,
    "pg_version": lambda arg, letters, context, policy: arg in {version for version, _name in context.pg_clusters},
    "pg_cluster": lambda arg, letters, context, policy: arg in {name for _version, name in context.pg_clusters},
    "probe_host": _probe_host,
    "secret_path": lambda arg, letters, context, policy: policy.is_secret(arg),
    "protected_path": lambda arg, letters, context, policy: policy.is_protected(arg),
    "protected_process": lambda arg, letters, context, policy: arg in policy.protected_processes,
    "protected_service": lambda arg, letters, context, policy: _unit_name(arg) in policy.protected_services,
}
PLACEHOLDERS_WITH_LETTERS = frozenset({"flags"})
