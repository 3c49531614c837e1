"""The policy as the judge holds it: decisions and verdicts, rules and the argument patterns they match, and how a rule
reads an argv (getopt's way, options among operands).

A pattern's placeholder asks ``placeholders`` whether an argument is the incident's, and a rule's ``restores`` asks
``restores`` whether its operands put back what the package (or the host's last known good copy) says; both take the
policy as a ``placeholders.PolicyView`` (what they ask of it), so neither imports this module.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from dataclasses import dataclass, field
from enum import Enum
from typing import Any, Iterable, Mapping, Sequence, Tuple, Union

from ansible_collections.sentinel.heal.plugins.module_utils._guard.context import PackagePath, PolicyContext
from ansible_collections.sentinel.heal.plugins.module_utils._guard.paths import PathResolver, compile_patterns
from ansible_collections.sentinel.heal.plugins.module_utils._guard.placeholders import PLACEHOLDERS
from ansible_collections.sentinel.heal.plugins.module_utils._guard.restores import RESTORES

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
ANY_EXECUTABLE = "*"
# a file name that says it holds a key or a password, wherever it lies (server-key.pem, privkey.crt, db-password.pem)
_NAMED_LIKE_A_KEY = re.compile(r"(?i)priv|secret|passw|shadow|token|credential|(^|[._-])keys?([._-]|$)")


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
    # a plan it sends to a person may be approved from a chat message's link or buttons (false: only with approve.yml)
    approve_from_chat: bool = True

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

    def approvable_from_chat(self, rule_id: str) -> bool:
        """Whether a step a rule of this id sends to a person may be approved from chat: no rule of the id says no."""
        return all(rule.approve_from_chat for rule in self.rules if rule.id == rule_id)

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
