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

import fnmatch
import hashlib
import posixpath
import re
import shlex
from dataclasses import dataclass, field
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Iterable, Mapping, Sequence

import yaml

from ansible_collections.sentinel.heal.plugins.plugin_utils.bash import bash_words
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import PolicyFileError
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision, Failure, Verdict

DEFAULT_POLICY_FILE = Path(__file__).resolve().parents[2] / "policies" / "default.yml"

# Characters that mean something to a shell. The executor never uses a shell, so a command that
# contains them is either an attack or a plan that would not do what it says. A rule may allow
# the glob characters for arguments it matches with {glob} (find -name '*.gz').
SHELL_SYNTAX = frozenset(";&|<>`$(){}*?[]\\!#~")
GLOB_CHARACTERS = frozenset("*?[]")
TRUSTED_BIN_DIRS = frozenset({"/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"})
ANY_EXECUTABLE = "*"

_PLACEHOLDER = re.compile(r"\{([a-z_]+)(?::([A-Za-z0-9]+))?\}")
_CANONICAL_INT = re.compile(r"^(0|[1-9][0-9]*)$")
_SIZE = re.compile(r"^[1-9][0-9]{0,5}[KMG]$")
_SED_PRINT = re.compile(r"^([1-9][0-9]*(,[1-9][0-9]*)?)?p$")
_WORD = re.compile(r"^[A-Za-z0-9@._+,:%=-]+$")
_NAME = re.compile(r"^[A-Za-z0-9@._+-]+$")
_SIGNED_SIZE = re.compile(r"^[+-]?[1-9][0-9]{0,8}[ckMG]?$")
_SAFE_MODE = re.compile(r"^0?[0-7][0145][0145]$")
_ROTATED_LOG = re.compile(r"\.(\d+|gz|xz|bz2|zst|old)$")
_GLOB = re.compile(r"^[A-Za-z0-9._*?-]+$")
_LOCAL_URL = re.compile(r"^https?://(127\.0\.0\.1|localhost|\[::1\])(:[0-9]{1,5})?(/[A-Za-z0-9._~%/=+,:@-]*)?$")
_TOP_KEYS = frozenset({"version", "include_default", "max_command_length", "protected_processes", "protected_services",
                       "protected_paths", "secret_paths", "blocked", "rules"})
_RULE_KEYS = frozenset({"id", "description", "executable", "services", "argv", "options", "operands", "requires",
                        "any_argument", "allow_globs", "decision", "become"})


@dataclass(frozen=True)
class PolicyContext:
    """What the incident knows, so rules can bind arguments to it (the service's own unit, ...)."""

    service: str | None = None
    init_service: str | None = None
    process: str | None = None
    user: str | None = None
    port_owners: Mapping[int, str] = field(default_factory=dict)
    service_pids: frozenset[int] = frozenset()
    ports: frozenset[int] = frozenset()
    stale_pidfile: str | None = None
    log_files: tuple[str, ...] = ()
    service_dirs: tuple[str, ...] = ()
    log_dirs: tuple[str, ...] = ()

    @classmethod
    def from_failure(cls, failure: Failure) -> PolicyContext:
        spec, evidence = failure.spec, failure.evidence
        pidfile = evidence.get("pidfile") or {}
        owners = {
            int(owner["pid"]): str(owner.get("process", ""))
            for owner in evidence.get("port_owners") or []
            if isinstance(owner.get("pid"), int)
        }
        process = str(spec.get("process") or failure.init_service)
        names = dict.fromkeys((failure.service, failure.init_service))
        logs = [str(p) for p in spec.get("logs") or ()]
        return cls(
            service=failure.service,
            init_service=failure.init_service,
            process=process,
            user=str(spec["user"]) if spec.get("user") else None,
            port_owners=owners,
            service_pids=frozenset(int(pid) for pid in evidence.get("processes") or [] if isinstance(pid, int)),
            ports=frozenset(int(port) for port in spec.get("ports") or []),
            stale_pidfile=pidfile.get("path") if pidfile.get("exists") and not pidfile.get("alive") else None,
            log_files=tuple(logs),
            service_dirs=service_dirs(failure),
            log_dirs=tuple(dict.fromkeys([f"/var/log/{name}" for name in names] + [posixpath.dirname(posixpath.normpath(log)) for log in logs])),
        )


def service_dirs(failure: Failure) -> tuple[str, ...]:
    """Directories that belong to the service: declared ``paths``, the usual per-service directories
    and the directories of its log files. Remediation may write only below these."""
    names = dict.fromkeys((failure.service, failure.init_service))
    candidates = [str(p) for p in failure.spec.get("paths") or []]
    candidates += [f"{base}/{name}" for name in names for base in ("/var/log", "/run", "/var/run", "/var/lib", "/var/cache")]
    candidates += [posixpath.dirname(str(log)) for log in failure.spec.get("logs") or []]
    return tuple(dict.fromkeys(posixpath.normpath(c) for c in candidates if c.startswith("/")))


@dataclass(frozen=True)
class Pattern:
    """One argument pattern: a literal, a choice, or literal text around one {placeholder}."""

    choices: tuple[str, ...] = ()
    prefix: str = ""
    placeholder: str | None = None
    letters: str = ""
    suffix: str = ""

    def matches(self, arg: str, context: PolicyContext, policy: Policy) -> bool:
        if self.placeholder is None:
            return arg in self.choices
        if not (arg.startswith(self.prefix) and arg.endswith(self.suffix)) or len(arg) < len(self.prefix) + len(self.suffix):
            return False
        value = arg[len(self.prefix):len(arg) - len(self.suffix)]
        return PLACEHOLDERS[self.placeholder](value, self.letters, context, policy)


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
        if not self.requires <= seen_options:
            return False
        if not self.variadic:
            return len(operands) == len(self.operands) and all(
                p.matches(a, context, policy) for p, a in zip(self.operands, operands, strict=True))
        *fixed, repeated = self.operands
        if len(operands) < len(fixed):
            return False
        patterns = fixed + [repeated] * (len(operands) - len(fixed))
        return all(p.matches(a, context, policy) for p, a in zip(patterns, operands, strict=True))


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
    _by_executable: dict[str, tuple[Rule, ...]] = field(default_factory=dict, compare=False, repr=False)
    _blocked_by_executable: dict[str, str | None] = field(default_factory=dict, compare=False, repr=False)

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

    def is_secret(self, path: str) -> bool:
        """A secret path, or a path below one (a secret directory covers everything in it)."""
        return any(fnmatch.fnmatchcase(path, pattern) or fnmatch.fnmatchcase(path, pattern.rstrip("/") + "/*") for pattern in self.secret_paths)

    def is_protected(self, path: str) -> bool:
        return any(fnmatch.fnmatchcase(path, pattern) for pattern in self.protected_paths)


def evaluate(command: Any, context: PolicyContext | None = None, policy: Policy | None = None) -> Verdict:
    """Decide one command string. Never raises for hostile input: the worst input gets BLOCK. Raises
    PolicyEngineUnavailable when the bash grammar that cross-checks every command is not installed."""
    policy = policy or load_policy()
    context = context or PolicyContext()
    if not isinstance(command, str):
        return _verdict(repr(command), (), Decision.BLOCK, "a command must be a string", "input", policy)
    if len(command) > policy.max_command_length:
        return _verdict(command, (), Decision.BLOCK, f"longer than {policy.max_command_length} characters", "length", policy)
    refused = _refused_character(command)
    if refused:
        return _verdict(command, (), Decision.BLOCK, refused, "charset", policy)
    syntax = SHELL_SYNTAX.intersection(command)
    if syntax - GLOB_CHARACTERS or (syntax and not _quoted_globs_only(command)):
        return _verdict(command, (), Decision.BLOCK, _syntax_reason(syntax), "shell-syntax", policy)
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        return _verdict(command, (), Decision.BLOCK, f"cannot be split into arguments: {exc}", "shell-syntax", policy)
    return evaluate_argv(argv, context, policy, command=command)


def evaluate_argv(argv: Sequence[str], context: PolicyContext, policy: Policy, *, command: str | None = None) -> Verdict:
    """Decide an already split command (the form plans and approvals carry). Every argument passes
    the same character checks as a command string, and bash's grammar must read ``command`` (by
    default the argv as approvers see it, shell-quoted) as exactly this argv."""
    argv = tuple(argv)
    if command is None:
        command = shlex.join(argv) if all(isinstance(a, str) for a in argv) else repr(argv)
    if not argv or not all(isinstance(a, str) for a in argv):
        return _verdict(command, (), Decision.BLOCK, "a command needs an executable and string arguments", "input", policy)
    if sum(len(a) + 1 for a in argv) > policy.max_command_length:
        return _verdict(command, argv, Decision.BLOCK, f"longer than {policy.max_command_length} characters", "length", policy)
    for arg in argv:
        refused = _refused_character(arg) or ("" if arg else "an empty argument")
        if refused:
            return _verdict(command, argv, Decision.BLOCK, refused, "charset", policy)
    globbed = any(GLOB_CHARACTERS.intersection(arg) for arg in argv)
    syntax = set().union(*(SHELL_SYNTAX.intersection(arg) for arg in argv)) - GLOB_CHARACTERS
    if syntax:
        return _verdict(command, argv, Decision.BLOCK, _syntax_reason(syntax), "shell-syntax", policy)
    read_by_bash = bash_words(command)
    if read_by_bash != argv:
        bash_reading = "not one simple command of literal words" if read_by_bash is None else f"the words {list(read_by_bash)}"
        return _verdict(command, argv, Decision.BLOCK, f"bash's grammar reads {bash_reading}, shlex {list(argv)}", "bash-grammar", policy)
    if argv[0] == "sudo":
        if len(argv) == 1 or argv[1].startswith("-"):
            return _verdict(command, argv, Decision.BLOCK, "sudo with options or without a command (the executor decides privilege)", "sudo", policy)
        argv = argv[1:]
    executable = argv[0]
    if "/" in executable:
        directory, name = posixpath.split(posixpath.normpath(executable))
        if directory not in TRUSTED_BIN_DIRS:
            reason = f"executable {executable!r} is outside the system bin directories"
            return _verdict(command, argv, Decision.APPROVE, reason, "untrusted-path", policy)
        executable = name
    blocked_reason = policy.blocked_reason(executable)
    if blocked_reason:
        return _verdict(command, argv, Decision.BLOCK, f"{executable}: {blocked_reason}", "blocked-executable", policy)
    args = argv[1:]
    for rule in policy.rules_for(executable):
        if (globbed and not rule.allow_globs and rule.decision is not Decision.BLOCK) or not rule.applies(executable, context):
            continue
        if rule.matches(args, context, policy):
            return _verdict(command, argv, rule.decision, rule.description, rule.id, policy, rule.become)
    if globbed:
        return _verdict(command, argv, Decision.BLOCK, "glob characters where no rule of the policy accepts a pattern", "shell-syntax", policy)
    # What a human approves without a rule runs as root, like remediation does; a rule can say otherwise.
    return _verdict(command, argv, Decision.APPROVE, f"no rule of the policy covers {executable} with these arguments",
                    "default-approve", policy, become=True)


def evaluate_all(commands: Iterable[str], context: PolicyContext | None = None, policy: Policy | None = None) -> tuple[list[Verdict], Decision]:
    verdicts = [evaluate(command, context, policy) for command in commands]
    return verdicts, Decision.strictest([v.decision for v in verdicts])


def _verdict(command: str, argv: tuple[str, ...], decision: Decision, reason: str, rule: str, policy: Policy, become: bool = False) -> Verdict:
    return Verdict(command=command, argv=argv, decision=decision, reason=reason, rule=rule, become=become, policy_version=policy.version)


def _refused_character(text: str) -> str:
    for position, char in enumerate(text):
        if not " " <= char <= "~":
            return f"character U+{ord(char):04X} at position {position} is not printable ASCII"
    return ""


def _syntax_reason(characters: Iterable[str]) -> str:
    return f"shell syntax {''.join(sorted(characters))!r} (commands never run through a shell)"


def _quoted_globs_only(command: str) -> bool:
    """Glob characters are tolerated only inside quotes, where a shell would not expand them either."""
    quote = ""
    for char in command:
        if quote:
            quote = "" if char == quote else quote
        elif char in "'\"":
            quote = char
        elif char in GLOB_CHARACTERS:
            return False
    return True


def _argument_values(args: Sequence[str]) -> Iterable[str]:
    """Each argument, plus what an option carries attached (--file=/x, -o/x), as a path check must see them."""
    for arg in args:
        yield arg
        if arg.startswith("-"):
            if "=" in arg:
                yield arg.split("=", 1)[1]
            if "/" in arg:
                yield arg[arg.index("/"):]


def _split_options(args: Sequence[str], options: Mapping[str, Pattern | None], context: PolicyContext,
                   policy: Policy) -> tuple[list[str], set[str]] | None:
    """Consume the options a rule knows, getopt-style; returns the operands and the options seen, or
    None when an option is unknown or its value does not match."""
    operands: list[str] = []
    seen: set[str] = set()
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
            seen.add(name)
            if value_pattern is None:
                if _equals:
                    return None
                continue
            if not _equals:
                if index >= len(args):
                    return None
                attached = args[index]
                index += 1
            if not value_pattern.matches(attached, context, policy):
                return None
            continue
        cluster = _short_cluster(arg[1:], options, context, policy)
        if cluster is None:
            return None
        seen |= cluster
    return operands, seen


def _short_cluster(letters: str, options: Mapping[str, Pattern | None], context: PolicyContext, policy: Policy) -> set[str] | None:
    """-ltn (flags without values) ending, optionally, in one option with its value attached (-bn1)."""
    seen = set()
    for position, letter in enumerate(letters):
        name = f"-{letter}"
        if name not in options:
            return None
        seen.add(name)
        pattern = options[name]
        if pattern is not None:
            rest = letters[position + 1:]
            return seen if rest and pattern.matches(rest, context, policy) else None
    return seen


def _normalized_path(arg: str) -> str | None:
    if not arg.startswith("/") or GLOB_CHARACTERS.intersection(arg):
        return None
    return posixpath.normpath(arg).replace("//", "/")


def _is_canonical_int(arg: str) -> bool:
    return bool(_CANONICAL_INT.match(arg))


def _under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _pid_placeholder(pids: Callable[[PolicyContext, Policy], Iterable[int]]) -> Callable[[str, str, PolicyContext, Policy], bool]:
    def match(arg: str, letters: str, context: PolicyContext, policy: Policy) -> bool:
        return _is_canonical_int(arg) and int(arg) > 1 and int(arg) in set(pids(context, policy))
    return match


def _path_placeholder(accept: Callable[[str, PolicyContext, Policy], bool]) -> Callable[[str, str, PolicyContext, Policy], bool]:
    def match(arg: str, letters: str, context: PolicyContext, policy: Policy) -> bool:
        path = _normalized_path(arg)
        return path is not None and not policy.is_secret(path) and accept(path, context, policy)
    return match


def _service_dir(path: str, context: PolicyContext, policy: Policy) -> bool:
    return not policy.is_protected(path) and any(_under(path, d) for d in context.service_dirs)


def _service_file(path: str, context: PolicyContext, policy: Policy) -> bool:
    return not policy.is_protected(path) and any(path.startswith(d.rstrip("/") + "/") for d in context.service_dirs)


def _service_log_file(path: str, context: PolicyContext, policy: Policy) -> bool:
    return not policy.is_protected(path) and any(path.startswith(d.rstrip("/") + "/") for d in context.log_dirs)


def _runtime_dir(path: str, context: PolicyContext, policy: Policy) -> bool:
    names = {context.service, context.init_service} - {None}
    return any(_under(path, f"{base}/{name}") for name in names for base in ("/run", "/var/run"))


def _service_user(arg: str, letters: str, context: PolicyContext, policy: Policy) -> bool:
    user, _colon, group = arg.partition(":")
    return context.user is not None and user == context.user and (not group or bool(_WORD.match(group)))


PLACEHOLDERS: dict[str, Callable[[str, str, PolicyContext, Policy], bool]] = {
    "init_service": lambda arg, letters, context, policy: context.init_service is not None and arg == context.init_service,
    "process": lambda arg, letters, context, policy: context.process is not None and arg in (context.process, context.process[:15]),
    "port_owner_pid": _pid_placeholder(lambda c, p: (pid for pid, name in c.port_owners.items() if name not in p.protected_processes)),
    "service_pid": _pid_placeholder(lambda c, p: c.service_pids),
    "port": lambda arg, letters, context, policy: _is_canonical_int(arg) and int(arg) in context.ports,
    "stale_pidfile": _path_placeholder(lambda path, context, policy: context.stale_pidfile is not None
                                       and path == posixpath.normpath(context.stale_pidfile)),
    "log_file": _path_placeholder(lambda path, context, policy: path in {posixpath.normpath(log) for log in context.log_files}),
    "service_dir": _path_placeholder(_service_dir),
    "service_file": _path_placeholder(_service_file),
    "service_log_file": _path_placeholder(_service_log_file),
    "rotated_log": _path_placeholder(lambda path, context, policy: _service_log_file(path, context, policy) and bool(_ROTATED_LOG.search(path))),
    "runtime_dir": _path_placeholder(_runtime_dir),
    "readable_file": _path_placeholder(lambda path, context, policy: True),
    "unit": lambda arg, letters, context, policy: context.init_service is not None
    and arg in (context.init_service, f"{context.init_service}.service"),
    "service_user": _service_user,
    "mode": lambda arg, letters, context, policy: bool(_SAFE_MODE.match(arg)),
    "signed_size": lambda arg, letters, context, policy: bool(_SIGNED_SIZE.match(arg)),
    "text": lambda arg, letters, context, policy: True,
    "count": lambda arg, letters, context, policy: _is_canonical_int(arg) and 1 <= int(arg) <= 100_000,
    "signed_count": lambda arg, letters, context, policy: _is_canonical_int(arg.lstrip("+-")) and len(arg) - len(arg.lstrip("+-")) <= 1,
    "size": lambda arg, letters, context, policy: bool(_SIZE.match(arg)),
    "flags": lambda arg, letters, context, policy: len(arg) > 1 and arg[0] == "-" and set(arg[1:]) <= set(letters),
    "word": lambda arg, letters, context, policy: bool(_WORD.match(arg)),
    "name": lambda arg, letters, context, policy: bool(_NAME.match(arg)),
    "glob": lambda arg, letters, context, policy: bool(_GLOB.match(arg)),
    "sed_print": lambda arg, letters, context, policy: bool(_SED_PRINT.match(arg)),
    "local_url": lambda arg, letters, context, policy: bool(_LOCAL_URL.match(arg)),
    "secret_path": lambda arg, letters, context, policy: arg.startswith("/") and policy.is_secret(posixpath.normpath(arg)),
    "protected_path": lambda arg, letters, context, policy: arg.startswith("/") and policy.is_protected(posixpath.normpath(arg)),
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
        root = yaml.compose(raw.decode("utf-8"), Loader=yaml.SafeLoader)
        data = yaml.safe_load(raw)
    except (yaml.YAMLError, UnicodeDecodeError) as exc:
        raise PolicyFileError(f"{path}: the policy file is not valid YAML", field="policy", value=path, hint=str(exc)) from exc
    return data, lambda where: _line_of(root, where)


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
    )


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
    for key in ("become", "allow_globs"):
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

    common: dict[str, Any] = dict(
        id=raw["id"], description=str(raw.get("description") or raw["id"]), executables=tuple(executables),
        services=tuple(services), decision=decision, become=raw.get("become", False), allow_globs=raw.get("allow_globs", False),
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
        options={name: None if value is None else pattern(f"options.{name}", value) for name, value in options.items()},
        operands=tuple(pattern(f"operands[{i}]", p) for i, p in enumerate(operands)),
        variadic=variadic,
        requires=frozenset(requires),
        **common,
    )


def _parse_pattern(where: str, value: Any, fail: Callable[..., PolicyFileError]) -> Pattern:
    if isinstance(value, list) and value and all(isinstance(v, str) for v in value):
        return Pattern(choices=tuple(value))
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
