"""The think loop's reads: what the planner asks to look at before it plans, and what came of each request.

    plan ─investigate─▶ observe ─▶ plan

Instead of a plan, the planner (a runbook's follow-up reads, or the LLM) may answer with up to
:data:`MAX_READS_PER_ROUND` commands it wants to read, each with why. The observe node judges each by the policy in
the incident's context, as it judges evidence commands; only an ALLOW by a rule marked ``read_only`` runs, at once,
all of a round in one ansible-runner run. Anything else (APPROVE, BLOCK, an allowed command that changes something, a
command read before, one past the round's or the incident's limits) does not run and is never queued for a human: the
planner is told why and plans without it. Outputs are redacted on the controller as every step's output is, capped
per read and per incident, and shown to a model fenced as untrusted data, so an instruction written into a log is
text, not a command. At most ``think_rounds`` rounds per attempt; then the planner plans or escalates.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass
from typing import Any, Iterable, Sequence

from ansible_collections.sentinel.heal.plugins.module_utils._text import clip
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision, PlanSource, Verdict

MAX_READS_PER_ROUND = 4
MAX_ROUNDS = 2
# characters of one read's output the planner is shown, and of all reads' output over an incident
READ_OUTPUT_LIMIT = 2000
READ_BUDGET = 16000
WHY_LIMIT = 200


@dataclass(frozen=True)
class ReadRequest:
    """One command the planner wants to read, and why."""

    argv: tuple[str, ...]
    why: str = ""
    # the tool call it came as (OpenAI tool calling), answered by its id; "" in the JSON form and for runbooks
    call_id: str = ""

    @property
    def command(self) -> str:
        return shlex.join(self.argv)


@dataclass(frozen=True)
class Investigation:
    """The planner's answer that asks to look first."""

    requests: tuple[ReadRequest, ...]
    source: PlanSource
    reference: str
    # what the model wrote (JSON form), replayed in the conversation of the next round
    said: str = ""


# What became of a request: it ran, or why it did not.
RAN = "ran"
REFUSED = "refused by policy"
NOT_A_READ = "not a read"
REPEATED = "already read"
OVER_LIMIT = "over the round's limit"
OVER_BUDGET = "over the incident's read budget"
LATE = "past the incident's deadline"
CHECK_MODE = "check mode"
NOT_RUN = "could not run"


@dataclass(frozen=True)
class Read:
    """One request, the guard's verdict on it, and what it printed when it ran."""

    request: ReadRequest
    outcome: str
    decision: Decision
    rule: str
    reason: str
    rc: int | None = None
    output: str = ""

    @property
    def ran(self) -> bool:
        return self.outcome == RAN

    def shown(self) -> str:
        """What the planner is told about it."""
        if self.ran:
            return f"rc={self.rc}\n{self.output}".rstrip()
        return f"{self.outcome}: {self.reason}"

    def describe(self) -> str:
        """One line for the timeline and the report."""
        why = f" ({self.request.why})" if self.request.why else ""
        head = f"{self.request.command}{why}: {self.decision.value} ({self.rule})"
        if self.ran:
            return f"{head}: rc={self.rc}, {len(self.output)} characters read"
        return f"{head}: not run, {self.outcome}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return {"argv": list(self.request.argv), "command": self.request.command, "why": self.request.why, "outcome": self.outcome,
                "decision": self.decision.value, "rule": self.rule, "reason": self.reason, "rc": self.rc, "output": self.output}


@dataclass(frozen=True)
class ReadRound:
    """One round of the think loop: what was asked, by whom, and each read."""

    number: int
    investigation: Investigation
    reads: tuple[Read, ...]
    artifacts: str = ""

    def to_dict(self) -> dict[str, Any]:
        return {"round": self.number, "source": self.investigation.source.value, "reference": self.investigation.reference,
                "reads": [read.to_dict() for read in self.reads], "artifacts": self.artifacts}


@dataclass(frozen=True)
class Thinking:
    """What the planner knows of the think loop in this attempt: the rounds so far and how many are left."""

    rounds: tuple[ReadRound, ...] = ()
    rounds_left: int = 0

    @property
    def read_commands(self) -> frozenset[str]:
        return frozenset(read.request.command for round_ in self.rounds for read in round_.reads)

    def what_was_read(self) -> str:
        """The reads of the attempt, for an escalation: each command and how it ended."""
        reads = [read for round_ in self.rounds for read in round_.reads]
        return "; ".join(f"{read.request.command} ({f'rc={read.rc}' if read.ran else read.outcome})" for read in reads) or "nothing"


NO_THINKING = Thinking()


@dataclass(frozen=True)
class Screened:
    """A request judged before anything runs: ``run`` is true only for an allowed read within every limit."""

    request: ReadRequest
    verdict: Verdict | None
    run: bool
    outcome: str
    reason: str


def screen(requests: Sequence[ReadRequest], verdicts: Sequence[Verdict | None], *, reads_only: Iterable[str], read_before: frozenset[str],
           check_mode: bool, late: bool, budget_left: int) -> list[Screened]:
    """Which requests run: an ALLOW by a read-only rule, not read before, within the round's limit and the incident's
    read budget, not in check mode nor past the deadline. ``verdicts`` holds the guard's verdict of each request (None past the round's limit, where
    the guard is not asked)."""
    read_only = frozenset(reads_only)
    screened: list[Screened] = []
    seen = set(read_before)
    for index, (request, verdict) in enumerate(zip(requests, verdicts, strict=True)):
        if verdict is None or index >= MAX_READS_PER_ROUND:
            screened.append(Screened(request, verdict, False, OVER_LIMIT, f"at most {MAX_READS_PER_ROUND} reads per round"))
        elif verdict.decision is not Decision.ALLOW:
            screened.append(Screened(request, verdict, False, REFUSED, verdict.reason))
        elif verdict.rule not in read_only:
            screened.append(Screened(request, verdict, False, NOT_A_READ,
                                     f"{verdict.rule} allows a change, and only reads run here; propose it as a step of the plan"))
        elif request.command in seen:
            screened.append(Screened(request, verdict, False, REPEATED, "its output is above"))
        elif budget_left <= 0:
            screened.append(Screened(request, verdict, False, OVER_BUDGET, f"{READ_BUDGET} characters were read for this incident"))
        elif late:
            screened.append(Screened(request, verdict, False, LATE, "nothing more runs for this incident"))
        elif check_mode:
            screened.append(Screened(request, verdict, False, CHECK_MODE, "it would run; nothing runs on the host in check mode"))
        else:
            screened.append(Screened(request, verdict, True, RAN, verdict.reason))
        seen.add(request.command)
    return screened


@dataclass
class ReadBudget:
    """Characters of read output an incident may still show the planner."""

    left: int = READ_BUDGET

    def take(self, output: str) -> str:
        shown = clip(output.strip(), max(min(READ_OUTPUT_LIMIT, self.left), 200), keep="middle")
        self.left -= len(shown)
        return shown
