"""The policy language: a policy's data (read from YAML on the controller, from JSON on a host) made into a Policy.

Every error names the key (``rules[3].argv[0]``), the value and what to write instead.
"""

from __future__ import annotations

import dataclasses
import hashlib
import posixpath
import re
from typing import Any, Callable

from ansible_collections.sentinel.heal.plugins.module_utils._errors import PolicyFileError
from ansible_collections.sentinel.heal.plugins.module_utils._guard.context import PackagePath
from ansible_collections.sentinel.heal.plugins.module_utils._guard.paths import validate_symlinks
from ansible_collections.sentinel.heal.plugins.module_utils._guard.placeholders import _NAME, PLACEHOLDERS, PLACEHOLDERS_WITH_LETTERS
from ansible_collections.sentinel.heal.plugins.module_utils._guard.restores import RESTORES, octal_mode
from ansible_collections.sentinel.heal.plugins.module_utils._guard.rules import BlockedGroup, Decision, Effect, Pattern, Policy, Rule

_PLACEHOLDER = re.compile(r"\{([a-z_]+)(?::([A-Za-z0-9]+))?\}")
_TOP_KEYS = frozenset({"version", "include_default", "max_command_length", "protected_processes", "protected_services",
                       "protected_paths", "secret_paths", "not_secret", "system_reads", "path_symlinks", "package_paths", "blocked", "rules"})
_RULE_KEYS = frozenset({"id", "description", "executable", "services", "argv", "options", "operands", "requires",
                        "any_argument", "allow_globs", "allow_braces", "decision", "become", "restores", "effect", "read_only",
                        "approve_from_chat"})


def parse_policy(data: Any, *, source: str, version: str, lines: Callable[[str], int | None] = lambda where: None,
                 base: Policy | None = None) -> Policy:
    def fail(message: str, where: str, value: Any, hint: str | None = None) -> PolicyFileError:
        line = lines(where)
        location = f"{source}:{line}" if line else source
        return PolicyFileError(f"{location}: {message}", field=where, value=value, hint=hint)

    if not isinstance(data, dict):
        raise fail("the policy must be a mapping", "(top level)", type(data).__name__, "see policies/default.yml")
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
    if octal_mode(mode) is None:
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
    for key in ("become", "allow_globs", "allow_braces", "read_only", "approve_from_chat"):
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
    if "approve_from_chat" in raw and decision is not Decision.APPROVE:
        raise fail("only a rule that sends a step to a person (decision: approve) says whether chat may approve it",
                   f"{where}.approve_from_chat", raw["approve_from_chat"], "drop it, or make the rule's decision approve")
    common: dict[str, Any] = dict(
        id=raw["id"], description=str(raw.get("description") or raw["id"]), executables=tuple(executables),
        services=tuple(services), decision=decision, become=raw.get("become", False), allow_globs=raw.get("allow_globs", False),
        allow_braces=raw.get("allow_braces", False), read_only=raw.get("read_only", False),
        approve_from_chat=raw.get("approve_from_chat", True),
        effect=None if effect is None else Effect(effect) if isinstance(effect, str) else {str(k): Effect(v) for k, v in effect.items()},
    )
    if "any_argument" in raw:
        return Rule(any_argument=pattern("any_argument", raw["any_argument"]), **common)
    if "argv" in raw:
        if not isinstance(raw["argv"], list):
            raise fail("'argv' must be a list of argument patterns", f"{where}.argv", raw["argv"])
        patterns, repeats = _repeated_last(raw["argv"], f"{where}.argv", fail)
        return Rule(argv=tuple(pattern(f"argv[{i}]", p) for i, p in enumerate(patterns)), variadic=repeats, **common)
    options = raw.get("options") or {}
    if not isinstance(options, dict) or not all(isinstance(k, str) and k.startswith("-") for k in options):
        raise fail("'options' maps each option (-x or --long) to the pattern of its value, or null", f"{where}.options", options)
    operands, variadic = _repeated_last(list(raw.get("operands") or []), f"{where}.operands", fail)
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


def _repeated_last(patterns: list[Any], where: str, fail: Callable[..., PolicyFileError]) -> tuple[list[Any], bool]:
    """The patterns without a trailing "...", and whether it was there (the pattern before it repeats zero or more
    times: the pids of one service's processes, the paths of one repair)."""
    if not patterns or patterns[-1] != "...":
        return patterns, False
    if len(patterns) == 1:
        raise fail("'...' repeats the pattern before it (zero or more times) and cannot stand alone", where, patterns)
    return patterns[:-1], True


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
    if name not in PLACEHOLDERS or bool(letters) != (name in PLACEHOLDERS_WITH_LETTERS):
        raise fail("unknown placeholder", where, value, f"known: {sorted(PLACEHOLDERS)} ({{flags:LETTERS}} takes letters)")
    return Pattern(prefix=value[:placeholder.start()], placeholder=name, letters=letters, suffix=value[placeholder.end():])


def policy_document(data: Any, *, source: str, version: str, base_data: Any = None) -> dict[str, Any]:
    """What the host role installs on a host: the policy's data (and the default's under it, when it includes the
    default) and the version the controller computed from them, so both sides judge with the same policy."""
    return {"source": source, "version": version, "layers": [layer for layer in (base_data, data) if layer is not None]}


def policy_from_document(document: Any) -> Policy:
    """The policy a document of :func:`policy_document` holds, under the version the controller gave it."""
    if not isinstance(document, dict) or not isinstance(document.get("layers"), list) or not document["layers"] \
            or len(document["layers"]) > 2 or not isinstance(document.get("version"), str):
        raise PolicyFileError("a policy document has a version and one or two layers of policy data", field="policy document",
                              value=sorted(document) if isinstance(document, dict) else type(document).__name__,
                              hint="apply the sentinel.heal.host role again")
    source = str(document.get("source") or "policy document")
    *bases, top = document["layers"]
    base = parse_policy(bases[0], source=source, version=document["version"]) if bases else None
    return dataclasses.replace(parse_policy(top, source=source, version=document["version"], base=base), version=document["version"])
