"""The guard: decides ALLOW / APPROVE / BLOCK for each command a plan proposes.

Parse, don't pattern-match: a command is refused outright when it carries characters or shell
syntax the executor would never give a shell anyway, then split with :mod:`shlex` and decided by
an allow-list of executables and argument patterns read from a YAML policy file. Anything the
policy does not understand is APPROVE; nothing is allowed by default.

Importable without Ansible's runtime for tests and benchmarks::

    from ansible_collections.sentinel.heal.plugins.plugin_utils.policy import evaluate
    evaluate("service nginx restart", PolicyContext(init_service="nginx"))
"""

from __future__ import annotations

import fnmatch
import hashlib
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Iterable, Mapping, Sequence

import yaml

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import PolicyFileError
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision, Failure, Verdict

DEFAULT_POLICY_FILE = Path(__file__).resolve().parents[2] / "policies" / "default.yml"

# Characters that mean something to a shell. The executor never uses a shell, so a command that
# contains them is either an attack or a plan that would not do what it says.
SHELL_SYNTAX = frozenset(";&|<>`$(){}*?[]\\!#~")
TRUSTED_BIN_DIRS = frozenset({"/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"})
CONTEXT_PLACEHOLDERS = frozenset({"init_service", "port_owner_pid", "stale_pidfile", "log_file"})
TYPED_PLACEHOLDERS = frozenset({"count"})
_PLACEHOLDER = re.compile(r"^\{([a-z_]+)(?::([A-Za-z]+))?\}$")
_RULE_KEYS = frozenset({"id", "description", "executable", "argv", "decision", "become"})
_TOP_KEYS = frozenset({"version", "max_command_length", "protected_processes", "blocked", "rules"})


@dataclass(frozen=True)
class PolicyContext:
    """What the incident knows, so rules can bind arguments to it (the service's own unit, ...)."""

    init_service: str | None = None
    port_owners: Mapping[int, str] = field(default_factory=dict)
    stale_pidfile: str | None = None
    log_files: tuple[str, ...] = ()

    @classmethod
    def from_failure(cls, failure: Failure) -> PolicyContext:
        pidfile = failure.evidence.get("pidfile") or {}
        owners = {
            int(owner["pid"]): str(owner.get("process", ""))
            for owner in failure.evidence.get("port_owners") or []
            if isinstance(owner.get("pid"), int)
        }
        return cls(
            init_service=failure.init_service,
            port_owners=owners,
            stale_pidfile=pidfile.get("path") if pidfile.get("exists") and not pidfile.get("alive") else None,
            log_files=tuple(str(p) for p in failure.spec.get("logs") or ()),
        )


@dataclass(frozen=True)
class Rule:
    id: str
    description: str
    executable: str
    argv: tuple[tuple[str, ...] | str, ...]
    decision: Decision
    become: bool


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
    blocked: tuple[BlockedGroup, ...]
    rules_by_executable: Mapping[str, tuple[Rule, ...]]

    def blocked_reason(self, executable: str) -> str | None:
        for group in self.blocked:
            if any(fnmatch.fnmatchcase(executable, pattern) for pattern in group.patterns):
                return group.reason
        return None


def evaluate(command: Any, context: PolicyContext | None = None, policy: Policy | None = None) -> Verdict:
    """Decide one command. Never raises for hostile input: the worst input gets BLOCK."""
    policy = policy or load_policy()
    context = context or PolicyContext()
    if not isinstance(command, str):
        return _verdict(repr(command), (), Decision.BLOCK, "a command must be a string", "input")
    if len(command) > policy.max_command_length:
        return _verdict(command, (), Decision.BLOCK, f"longer than {policy.max_command_length} characters", "length")
    for position, char in enumerate(command):
        if not " " <= char <= "~":
            return _verdict(command, (), Decision.BLOCK, f"character U+{ord(char):04X} at position {position} is not printable ASCII", "charset")
    syntax = sorted(SHELL_SYNTAX.intersection(command))
    if syntax:
        return _verdict(command, (), Decision.BLOCK, f"shell syntax {''.join(syntax)!r} (commands never run through a shell)", "shell-syntax")
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        return _verdict(command, (), Decision.BLOCK, f"cannot be split into arguments: {exc}", "shell-syntax")
    return evaluate_argv(argv, context, policy, command=command)


def evaluate_argv(argv: Sequence[str], context: PolicyContext, policy: Policy, *, command: str | None = None) -> Verdict:
    """Decide an already split command (the form plans and approvals carry)."""
    argv = tuple(argv)
    command = command if command is not None else shlex.join(argv)
    if not argv:
        return _verdict(command, argv, Decision.BLOCK, "empty command", "input")
    if argv[0] == "sudo":
        if len(argv) == 1 or argv[1].startswith("-"):
            return _verdict(command, argv, Decision.BLOCK, "sudo with options or without a command", "sudo")
        argv = argv[1:]
    executable = argv[0]
    if "/" in executable:
        directory, name = posixpath.split(posixpath.normpath(executable))
        if directory not in TRUSTED_BIN_DIRS:
            return _verdict(command, argv, Decision.APPROVE, f"executable {executable!r} is outside the system bin directories", "untrusted-path")
        executable = name
    blocked_reason = policy.blocked_reason(executable)
    if blocked_reason:
        return _verdict(command, argv, Decision.BLOCK, f"{executable}: {blocked_reason}", "blocked-executable")
    for rule in policy.rules_by_executable.get(executable, ()):
        if _argv_matches(rule.argv, argv[1:], context, policy):
            return _verdict(command, argv, rule.decision, rule.description, rule.id, rule.become)
    return _verdict(command, argv, Decision.APPROVE, f"no rule of the policy covers {executable} with these arguments", "default-approve")


def evaluate_all(commands: Iterable[str], context: PolicyContext | None = None, policy: Policy | None = None) -> tuple[list[Verdict], Decision]:
    verdicts = [evaluate(command, context, policy) for command in commands]
    return verdicts, Decision.strictest([v.decision for v in verdicts])


def _verdict(command: str, argv: tuple[str, ...], decision: Decision, reason: str, rule: str, become: bool = False) -> Verdict:
    return Verdict(command=command, argv=argv, decision=decision, reason=reason, rule=rule, become=become)


def _argv_matches(patterns: Sequence[tuple[str, ...] | str], args: Sequence[str], context: PolicyContext, policy: Policy) -> bool:
    return len(patterns) == len(args) and all(_arg_matches(p, a, context, policy) for p, a in zip(patterns, args, strict=True))


def _arg_matches(pattern: tuple[str, ...] | str, arg: str, context: PolicyContext, policy: Policy) -> bool:
    if isinstance(pattern, tuple):
        return arg in pattern
    placeholder = _PLACEHOLDER.match(pattern)
    if not placeholder:
        return arg == pattern
    name, letters = placeholder.groups()
    if name == "flags":
        return len(arg) > 1 and arg[0] == "-" and set(arg[1:]) <= set(letters or "")
    if name == "count":
        return arg.isdigit() and 1 <= int(arg) <= 10000
    if name == "init_service":
        return context.init_service is not None and arg == context.init_service
    if name == "port_owner_pid":
        if not arg.isdigit() or int(arg) <= 1:
            return False
        process = context.port_owners.get(int(arg))
        return process is not None and process not in policy.protected_processes
    if name == "stale_pidfile":
        return context.stale_pidfile is not None and _same_path(arg, context.stale_pidfile)
    if name == "log_file":
        return any(_same_path(arg, log) for log in context.log_files)
    return False


def _same_path(arg: str, expected: str) -> bool:
    return arg.startswith("/") and posixpath.normpath(arg) == posixpath.normpath(expected)


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
    try:
        data = yaml.safe_load(raw)
    except yaml.YAMLError as exc:
        raise PolicyFileError("the policy file is not valid YAML", field="policy", value=path, hint=str(exc)) from exc
    return parse_policy(data, source=path, version=hashlib.sha256(raw).hexdigest()[:16])


def parse_policy(data: Any, *, source: str, version: str) -> Policy:
    if not isinstance(data, dict):
        raise PolicyFileError("the policy must be a mapping", field="(top level)", value=type(data).__name__, hint=f"see {DEFAULT_POLICY_FILE}")
    _reject_unknown_keys(data, _TOP_KEYS, "(top level)", source)
    if data.get("version") != 1:
        raise PolicyFileError(f"{source}: unsupported policy version", field="version", value=data.get("version"), hint="use version: 1")
    max_length = data.get("max_command_length", 512)
    if not isinstance(max_length, int) or max_length < 16:
        raise PolicyFileError(f"{source}: invalid length limit", field="max_command_length", value=max_length, hint="a whole number of at least 16")
    blocked = tuple(_parse_blocked(i, group, source) for i, group in enumerate(_list(data, "blocked", source)))
    rules: dict[str, list[Rule]] = {}
    seen_ids: set[str] = set()
    for index, raw_rule in enumerate(_list(data, "rules", source)):
        rule = _parse_rule(index, raw_rule, source)
        if rule.id in seen_ids:
            raise PolicyFileError(f"{source}: duplicate rule id", field=f"rules[{index}].id", value=rule.id, hint="rule ids must be unique")
        seen_ids.add(rule.id)
        rules.setdefault(rule.executable, []).append(rule)
    return Policy(
        version=version,
        source=source,
        max_command_length=max_length,
        protected_processes=frozenset(str(p) for p in _list(data, "protected_processes", source)),
        blocked=blocked,
        rules_by_executable={exe: tuple(group) for exe, group in rules.items()},
    )


def _list(data: Mapping[str, Any], key: str, source: str) -> list[Any]:
    value = data.get(key) or []
    if not isinstance(value, list):
        raise PolicyFileError(f"{source}: must be a list", field=key, value=value)
    return value


def _reject_unknown_keys(data: Mapping[str, Any], allowed: frozenset[str], where: str, source: str) -> None:
    unknown = sorted(set(data) - allowed)
    if unknown:
        raise PolicyFileError(
            f"{source}: unknown key in {where}", field=f"{where}.{unknown[0]}", value=data[unknown[0]], hint=f"known keys: {sorted(allowed)}",
        )


def _parse_blocked(index: int, group: Any, source: str) -> BlockedGroup:
    where = f"blocked[{index}]"
    if not isinstance(group, dict) or not isinstance(group.get("reason"), str) or not isinstance(group.get("executables"), list):
        raise PolicyFileError(f"{source}: a blocked group needs 'reason' (text) and 'executables' (list)", field=where, value=group)
    _reject_unknown_keys(group, frozenset({"reason", "executables"}), where, source)
    return BlockedGroup(reason=group["reason"], patterns=tuple(str(p) for p in group["executables"]))


def _parse_rule(index: int, raw: Any, source: str) -> Rule:
    where = f"rules[{index}]"
    if not isinstance(raw, dict):
        raise PolicyFileError(f"{source}: a rule must be a mapping", field=where, value=raw)
    _reject_unknown_keys(raw, _RULE_KEYS, where, source)
    for key in ("id", "executable"):
        if not isinstance(raw.get(key), str) or not raw[key]:
            raise PolicyFileError(f"{source}: a rule needs a non-empty '{key}'", field=f"{where}.{key}", value=raw.get(key))
    if "/" in raw["executable"]:
        raise PolicyFileError(f"{source}: name the executable, not its path", field=f"{where}.executable", value=raw["executable"])
    try:
        decision = Decision(str(raw.get("decision")))
    except ValueError:
        raise PolicyFileError(
            f"{source}: unknown decision", field=f"{where}.decision", value=raw.get("decision"), hint="allow, approve or block",
        ) from None
    if not isinstance(raw.get("argv"), list):
        raise PolicyFileError(f"{source}: 'argv' must be a list of argument patterns", field=f"{where}.argv", value=raw.get("argv"))
    if not isinstance(raw.get("become", False), bool):
        raise PolicyFileError(f"{source}: 'become' must be true or false", field=f"{where}.become", value=raw.get("become"))
    patterns = tuple(_parse_pattern(f"{where}.argv[{i}]", p, source) for i, p in enumerate(raw["argv"]))
    return Rule(
        id=raw["id"],
        description=str(raw.get("description") or raw["id"]),
        executable=raw["executable"],
        argv=patterns,
        decision=decision,
        become=raw.get("become", False),
    )


def _parse_pattern(where: str, pattern: Any, source: str) -> tuple[str, ...] | str:
    if isinstance(pattern, list) and pattern and all(isinstance(p, str) for p in pattern):
        return tuple(pattern)
    if not isinstance(pattern, str):
        raise PolicyFileError(f"{source}: an argument pattern is a string or a list of strings", field=where, value=pattern)
    placeholder = _PLACEHOLDER.match(pattern)
    if placeholder:
        name, letters = placeholder.groups()
        known = name in CONTEXT_PLACEHOLDERS | TYPED_PLACEHOLDERS or (name == "flags" and letters)
        if not known:
            raise PolicyFileError(
                f"{source}: unknown placeholder", field=where, value=pattern,
                hint=f"known: {sorted(CONTEXT_PLACEHOLDERS | TYPED_PLACEHOLDERS)} and {{flags:LETTERS}}",
            )
    return pattern
