"""The plan as a whole: what each step does to the incident's units and package directories, and the end state the
steps leave together (a unit stopped and never started again, a directory made and never finished, logs removed).
"""

from __future__ import annotations

import dataclasses
from typing import Sequence

from ansible_collections.sentinel.heal.plugins.module_utils._guard.context import PolicyContext
from ansible_collections.sentinel.heal.plugins.module_utils._guard.placeholders import own_unit, unit_name
from ansible_collections.sentinel.heal.plugins.module_utils._guard.rules import (
    Decision,
    Effect,
    Policy,
    Repair,
    Rule,
    StepEffect,
    Verdict,
    split_options,
)

# the restores whose step leaves a package directory part of the way to its package's owner, group and mode
_REPAIRS = {"ownership": Repair.OWNER, "mode": Repair.MODE, "directory_for_the_plan": Repair.MADE}


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


def repair_of(rule: Rule, args: Sequence[str], context: PolicyContext, policy: Policy) -> StepEffect | None:
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


def effect_target(executable: str, args: Sequence[str], context: PolicyContext) -> str:
    """The unit a step starts or stops: the one it names, a PostgreSQL cluster's instance, or, for a signal to the
    service's processes, the unit that runs them."""
    if executable == "pg_ctlcluster" and len(args) >= 2:
        return f"{context.init_service}@{args[0]}-{args[1]}"
    named = next((unit_name(arg) for arg in args if own_unit(arg, context)), None)
    # an alias is the unit it names: stopping redis and starting redis-server leaves nothing stopped
    if named in context.unit_names:
        named = context.unit
    return named or context.unit or context.init_service or ""
