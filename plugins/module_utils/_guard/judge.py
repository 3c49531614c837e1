"""The argv judge: decides ALLOW / APPROVE / BLOCK for each step of a plan, against the incident's context.

One implementation for both sides: the controller's guard judges plans with it, and the executor on each host judges
every step again with it, in a context it gathered itself (stdlib only, for the targets' Python). Parse, don't
pattern-match: every argument passes the character checks, then hard denies by executable, then the first rule of the
executable whose arguments match. Anything the policy does not understand is APPROVE; nothing is allowed by default.

Here the entry points and the checks every argv passes before any rule; the judge's parts live beside it: the
policy's rules, their patterns and how they read an argv (``rules``), what binds an argument to the incident
(``placeholders``), what a rule's ``restores`` checks (``restores``) and the plan judged as a whole (``plan``). What
the judge reads and does not decide is there too: the rule language (``policy_language``), the incident's context
(``context``) and the reading of paths (``paths``).
"""

from __future__ import annotations

import posixpath
import shlex
from typing import Any, Callable, Iterable, Sequence

from ansible_collections.sentinel.heal.plugins.module_utils._guard.context import PolicyContext
from ansible_collections.sentinel.heal.plugins.module_utils._guard.placeholders import (
    DATA_AREAS,
    LOOPBACK_HOSTS,
    PLACEHOLDERS,
    PLACEHOLDERS_WITH_LETTERS,
    UNIT_PROPERTIES,
    own_units,
)
from ansible_collections.sentinel.heal.plugins.module_utils._guard.plan import effect_target, judge_plan, repair_of
from ansible_collections.sentinel.heal.plugins.module_utils._guard.restores import KNOWN_GOOD_SETTINGS, RESTORES, octal_mode
from ansible_collections.sentinel.heal.plugins.module_utils._guard.rules import (
    ANY_EXECUTABLE,
    BRACE_CHARACTERS,
    GLOB_CHARACTERS,
    QUOTABLE_CHARACTERS,
    SHELL_SYNTAX,
    BlockedGroup,
    Decision,
    Effect,
    Pattern,
    Policy,
    Repair,
    Rule,
    StepEffect,
    Verdict,
    split_options,
)

# every name this module gave before the judge's parts moved beside it: the controller, the executor and the tests
# import them from here
__all__ = [
    "ANY_EXECUTABLE", "BRACE_CHARACTERS", "DATA_AREAS", "GLOB_CHARACTERS", "KNOWN_GOOD_SETTINGS", "LOOPBACK_HOSTS", "PLACEHOLDERS",
    "PLACEHOLDERS_WITH_LETTERS", "QUOTABLE_CHARACTERS", "RESTORES", "SHELL_SYNTAX", "TRUSTED_BIN_DIRS", "UNIT_PROPERTIES",
    "BlockedGroup", "Decision", "Effect", "Pattern", "Policy", "Repair", "Rule", "StepEffect", "Verdict", "judge_argv",
    "judge_plan", "judge_steps", "octal_mode", "own_units", "refused_character", "split_options", "syntax_reason", "verdict",
]

TRUSTED_BIN_DIRS = frozenset({"/bin", "/sbin", "/usr/bin", "/usr/sbin", "/usr/local/bin", "/usr/local/sbin"})


def judge_steps(steps: Sequence[Sequence[str]], context: PolicyContext, policy: Policy,
                words_of: Callable[[str], tuple[str, ...] | None] | None = None) -> tuple[list[Verdict], Decision]:
    """Judge a plan of argv steps, each by the rules and then the plan as a whole: the verdicts and the strictest
    decision. ``words_of``: a second, independent reading of each step's shell-quoted form (bash's grammar, on the
    controller), which must give the same argv."""
    return judge_plan([judge_argv(step, context, policy, words_of=words_of) for step in steps], context)


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
            return judged, repair_of(rule, args, context, policy) if effect is None else (effect, effect_target(executable, args, context))
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
