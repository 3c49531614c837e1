"""The guard on the controller: the YAML policy and command strings, judged by the shared argv judge.

The judge itself - the rule types, their placeholders, the policy language and the incident's context - lives in
``plugins/module_utils/_guard/`` (``judge``, ``policy_language``, ``context``, ``paths``), because every host's executor
runs it too, with the standard library only; this room adapts it to the controller.

A command string is refused outright when it carries characters the executor would never hand to a shell anyway
(control and non-ASCII characters, shell syntax), then split with :mod:`shlex` and judged as an argv by
``module_utils._guard.judge`` - the judge the executor on each host runs again - with bash's own grammar as a second reading
that must agree (see :mod:`.bash`). The rule language is documented at the top of ``policies/default.yml``.

Importable without Ansible's runtime for tests and benchmarks::

    from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import PolicyContext, evaluate
    evaluate("service nginx restart", PolicyContext(service="nginx", init_service="nginx"))
"""

from __future__ import annotations

import hashlib
import re
import shlex
from functools import lru_cache
from pathlib import Path
from typing import Any, Callable, Sequence

import yaml

from ansible_collections.sentinel.heal.plugins.module_utils._guard.context import PolicyContext
from ansible_collections.sentinel.heal.plugins.module_utils._guard.judge import (
    QUOTABLE_CHARACTERS,
    SHELL_SYNTAX,
    TRUSTED_BIN_DIRS,
    Decision,
    Effect,
    Policy,
    Rule,
    StepEffect,
    Verdict,
    judge_argv,
    judge_plan,
    refused_character,
    syntax_reason,
    verdict,
)
from ansible_collections.sentinel.heal.plugins.module_utils._guard.policy_language import parse_policy, policy_document
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import PolicyFileError
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.bash import bash_words
from ansible_collections.sentinel.heal.plugins.plugin_utils.yamlfile import YAML_LOADER, file_version

DEFAULT_POLICY_FILE = Path(__file__).resolve().parents[3] / "policies" / "default.yml"

__all__ = ["DEFAULT_POLICY_FILE", "TRUSTED_BIN_DIRS", "Policy", "PolicyContext", "Rule", "evaluate", "evaluate_argv", "evaluate_plan",
           "host_policy_document", "load_policy", "parse_policy"]


def evaluate(command: Any, context: PolicyContext | None = None, policy: Policy | None = None) -> Verdict:
    """Decide one command string, as a one-step plan. Never raises for hostile input: the worst input
    gets BLOCK. Raises PolicyEngineUnavailable when the bash grammar that cross-checks every command
    is not installed."""
    policy = policy or load_policy()
    context = context or PolicyContext()
    [judged], _decision = judge_plan([_judge_command(command, context, policy)], context)
    return judged


def evaluate_argv(argv: Sequence[str], context: PolicyContext, policy: Policy, *, command: str | None = None) -> Verdict:
    """Decide an already split command (the form plans and approvals carry), as a one-step plan."""
    [judged], _decision = judge_plan([_judge_step(argv, context, policy, command=command)], context)
    return judged


def evaluate_plan(steps: Sequence[Any], context: PolicyContext | None = None, policy: Policy | None = None) -> tuple[list[Verdict], Decision]:
    """Judge a plan: each step (a command string, or an argv as plans carry them) by the rules, then the
    plan as a whole: a plan whose net effect leaves the incident's service stopped needs a human, and
    so does any step that removes or empties the service's logs. Returns the verdicts and the strictest
    decision. The heal loop, approvals and ``policy_check`` all judge through here."""
    policy = policy or load_policy()
    context = context or PolicyContext()
    judged = [_judge_step(step, context, policy) if isinstance(step, (list, tuple)) else _judge_command(step, context, policy)
              for step in steps]
    return judge_plan(judged, context)


def starts_the_service(argv: Sequence[str], context: PolicyContext, policy: Policy) -> bool:
    """Whether the step starts or restarts the incident's own service, as the rule that judges it says (its ``effect``):
    the policy is what knows the service manager's verbs, aliases and a cluster's instances."""
    _verdict, effect = _judge_step(argv, context, policy)
    return effect is not None and effect[0] is Effect.STARTS


def _judge_command(command: Any, context: PolicyContext, policy: Policy) -> tuple[Verdict, StepEffect | None]:
    if not isinstance(command, str):
        return verdict(repr(command), (), Decision.BLOCK, "a command must be a string", "input", policy), None
    if len(command) > policy.max_command_length:
        return verdict(command, (), Decision.BLOCK, f"longer than {policy.max_command_length} characters", "length", policy), None
    refused = refused_character(command)
    if refused:
        return verdict(command, (), Decision.BLOCK, refused, "charset", policy), None
    syntax = SHELL_SYNTAX.intersection(command)
    if syntax - QUOTABLE_CHARACTERS or (syntax and not _quoted_only(command)):
        return verdict(command, (), Decision.BLOCK, syntax_reason(syntax), "shell-syntax", policy), None
    try:
        argv = shlex.split(command)
    except ValueError as exc:
        return verdict(command, (), Decision.BLOCK, f"cannot be split into arguments: {exc}", "shell-syntax", policy), None
    return _judge_step(argv, context, policy, command=command)


def _judge_step(argv: Sequence[Any], context: PolicyContext, policy: Policy, *, command: str | None = None) -> tuple[Verdict, StepEffect | None]:
    return judge_argv(argv, context, policy, command=command, words_of=bash_words)


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


def load_policy(path: str | Path | None = None) -> Policy:
    """Load and validate a policy file (the shipped default when no path is given)."""
    resolved = Path(path).expanduser().resolve() if path else DEFAULT_POLICY_FILE
    try:
        version = file_version(resolved)
    except OSError as exc:
        raise PolicyFileError("cannot read the policy file", field="policy", value=str(resolved), hint=str(exc)) from exc
    return _load_policy_cached(*version)


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


def host_policy_document(path: str | Path | None = None) -> dict[str, Any]:
    """The policy a host's executor enforces, as the host role installs it: the data of the policy file (and of the
    default under it, when the file includes it) with the version this controller judges under."""
    policy = load_policy(path)
    data, _lines = _parse_yaml(Path(policy.source).read_bytes(), policy.source)
    base = None
    if policy.source != str(DEFAULT_POLICY_FILE) and isinstance(data, dict) and data.get("include_default"):
        base, _lines = _parse_yaml(DEFAULT_POLICY_FILE.read_bytes(), str(DEFAULT_POLICY_FILE))
    return policy_document(data, source=policy.source, version=policy.version, base_data=base)
