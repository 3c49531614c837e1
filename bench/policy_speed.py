"""Policy decisions per second (one core) and the corpus scores.

Runs the guard over the project's corpus (hostile commands with their evasions, and legitimate
commands; the red teams' probes and what an SRE runs are scored, not timed) and, in the same process on the same
commands, plain shlex.split as the baseline: the
least any guard that parses must do. Prints decisions per second (target: at least 20,000), the
ratio to the baseline, and the corpus scores. Part of `make bench`.
"""

from __future__ import annotations

import contextlib
import os
import shlex
import sys
import time
from collections import Counter
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / ".collections"), str(ROOT / "tests" / "unit" / "plugins" / "plugin_utils" / "guard")]

from test_policy_corpus import CONTEXTS, hostile_corpus, legitimate_corpus  # noqa: E402
from test_policy_red_team import red_team  # noqa: E402
from test_policy_red_team_host import benign_host, red_team_host  # noqa: E402

from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import evaluate, evaluate_plan, load_policy  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision  # noqa: E402

ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
TARGET_PER_SECOND = 20_000


def per_second(function, commands: list[str]) -> float:  # type: ignore[no-untyped-def]
    best = float("inf")
    for _round in range(ROUNDS):
        started = time.perf_counter()
        for command in commands:
            function(command)
        best = min(best, time.perf_counter() - started)
    return len(commands) / best


def main() -> None:
    os.sched_setaffinity(0, {min(os.sched_getaffinity(0))})  # one core
    policy = load_policy()
    context = CONTEXTS["nginx"]
    hostile = [command for _family, command in hostile_corpus()]
    legitimate = legitimate_corpus()
    commands = hostile + [command for _service, command, _expected in legitimate]

    def splitting(command: str) -> None:
        with contextlib.suppress(ValueError):
            shlex.split(command)

    baseline = per_second(splitting, commands)
    guarded = per_second(lambda command: evaluate(command, context, policy), commands)
    legitimate_only = [command for _service, command, _expected in legitimate]
    guarded_legitimate = per_second(lambda command: evaluate(command, context, policy), legitimate_only)

    hostile_decisions = Counter(evaluate(command, ctx, policy).decision for command in hostile for ctx in CONTEXTS.values())
    expected_hits = sum(evaluate(command, CONTEXTS[service], policy).decision is expected for service, command, expected in legitimate)

    print(f"policy {policy.version} on one core, {len(commands)} commands, best of {ROUNDS} rounds")
    print(f"  shlex.split only (baseline)   {baseline:10,.0f} commands/s")
    print(f"  guard decisions               {guarded:10,.0f} decisions/s  ({guarded / baseline:.2f}x the baseline)"
          f"  target >= {TARGET_PER_SECOND:,}: {'met' if guarded >= TARGET_PER_SECOND else 'MISSED'}")
    print(f"  ... legitimate commands only  {guarded_legitimate:10,.0f} decisions/s  (they pass every check and reach the rules)")
    total = sum(hostile_decisions.values())
    print(f"  hostile ({len(hostile)} commands x {len(CONTEXTS)} incidents): allow {hostile_decisions[Decision.ALLOW]}, "
          f"approve {hostile_decisions[Decision.APPROVE]} ({hostile_decisions[Decision.APPROVE] / total:.1%}), "
          f"block {hostile_decisions[Decision.BLOCK]} ({hostile_decisions[Decision.BLOCK] / total:.1%})  target: allow 0")
    print(f"  legitimate ({len(legitimate)} commands): {expected_hits / len(legitimate):.1%} get the expected decision  target >= 95%")
    probes = [[probe] if isinstance(probe, str) else list(probe) for probes in red_team().values() for probe in probes]
    red = Counter(evaluate_plan(plan, ctx, policy)[1] for plan in probes for ctx in CONTEXTS.values())
    print(f"  red team ({len(probes)} probes as plans x {len(CONTEXTS)} incidents): allow {red[Decision.ALLOW]}, "
          f"approve {red[Decision.APPROVE]}, block {red[Decision.BLOCK]}  target: allow 0")
    probes = [[probe] if isinstance(probe, str) else list(probe) for probes in red_team_host().values() for probe in probes]
    red = Counter(evaluate_plan(plan, ctx, policy)[1] for plan in probes for ctx in CONTEXTS.values())
    print(f"  second red team, on the host ({len(probes)} probes as plans x {len(CONTEXTS)} incidents): allow {red[Decision.ALLOW]}, "
          f"approve {red[Decision.APPROVE]}, block {red[Decision.BLOCK]}  target: allow 0")
    benign = benign_host()
    allowed = sum(evaluate_plan([command], CONTEXTS[service], policy)[1] is Decision.ALLOW for service, command in benign)
    print(f"  what an SRE runs in the incident ({len(benign)} commands): {allowed / len(benign):.1%} allowed  target: 100%")


if __name__ == "__main__":
    main()
