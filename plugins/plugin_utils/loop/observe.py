"""The think loop's reads: what the planner asked to look at, judged by the guard, the allowed reads run at once, and
the diagnosis read again with what they printed."""

from __future__ import annotations

import dataclasses
import functools
from dataclasses import dataclass
from typing import Mapping

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.investigation import (
    MAX_READS_PER_ROUND,
    NOT_RUN,
    Investigation,
    Read,
    ReadRound,
    Screened,
    Thinking,
    screen,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.planner import Diagnosis
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.reading import read_failure
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ExecutorError, FlowError
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.steps import RunReport
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import evaluate_argv
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.diagnose import package_dir, read_step
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.engine import DEFAULT_ACTION
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.graph import ToolNode
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import IncidentState, Toolkit


@dataclass(frozen=True)
class Looking:
    """What the observe node reads: the requests as the guard judged them, and how long the run may take."""

    investigation: Investigation
    screened: list[Screened]
    time_left: float
    service: str


class ObserveNode(ToolNode):
    """The think loop's reads: each request judged by the guard in the incident's context; the allowed reads (rules
    marked read_only) of the round run at once, as the diagnosis's evidence is read (the evidence module, which redacts
    what they print on the host, or the host's executor); nothing else runs or waits for anyone."""

    node_name = "observe"

    def prep(self, state: IncidentState) -> Looking:
        investigation = state.investigation
        if investigation is None:
            raise FlowError("observe ran without reads to make", field="investigation", value=None)
        policy = self.tools.policy
        context = self.tools.policy_context(state.failure)
        requests = investigation.requests
        verdicts = [evaluate_argv(request.argv, context, policy) if index < MAX_READS_PER_ROUND else None
                    for index, request in enumerate(requests)]
        diagnosis = state.diagnosis
        read_before = frozenset(diagnosis.outputs if diagnosis else ()) | Thinking(tuple(state.attempt.rounds)).read_commands
        time_left = self._deadline(state) - self.tools.clock()
        screened = screen(requests, verdicts, reads_only=policy.read_only_rules, read_before=read_before,
                          check_mode=self.tools.check_mode, late=time_left <= 0, budget_left=state.read_budget.left)
        return Looking(investigation, screened, time_left, state.failure.service)

    def exec(self, prep_res: Looking) -> RunReport | None:
        steps = [read_step(prep_res.service, item.verdict) for item in prep_res.screened if item.run and item.verdict is not None]
        if not steps:
            return None
        reader = self.tools.evidence_executor or self.tools.executor
        return reader.run(self.tools.target, steps, purpose="investigate", timeout=prep_res.time_left)

    def exec_fallback(self, prep_res: Looking, exc: Exception) -> ExecutorError:
        if isinstance(exc, ExecutorError):
            return exc
        raise exc

    def post(self, state: IncidentState, prep_res: Looking, exec_res: RunReport | ExecutorError | None) -> str:
        results = iter(exec_res.results if isinstance(exec_res, RunReport) else ())
        reads = []
        for item in prep_res.screened:
            verdict = item.verdict
            decision, rule = (verdict.decision, verdict.rule) if verdict else (Decision.BLOCK, "think-loop")
            if not item.run:
                reads.append(Read(item.request, item.outcome, decision, rule, item.reason))
            elif isinstance(exec_res, ExecutorError):
                reads.append(Read(item.request, NOT_RUN, decision, rule, str(exec_res)))
            else:
                result = next(results)
                reads.append(Read(item.request, item.outcome, decision, rule, item.reason, rc=result.rc,
                                  output=state.read_budget.take(result.output)))
        round_ = ReadRound(number=len(state.attempt.rounds) + 1, investigation=prep_res.investigation, reads=tuple(reads),
                           artifacts=exec_res.artifacts if isinstance(exec_res, RunReport) else "")
        state.attempt.rounds.append(round_)
        state.investigation = None
        if round_.artifacts:
            state.attempt.artifacts.append(round_.artifacts)
        for read in reads:
            state.log(self.name, read.describe())
        ran = {read.request.command: read.output for read in reads if read.ran}
        if ran and state.diagnosis is not None:
            state.diagnosis = _with_reads(state, self.tools, state.diagnosis, ran)
            if state.diagnosis.reading.decisive is not None:
                state.log(self.name, f"read as {state.diagnosis.reading.decisive.kind}: {state.diagnosis.reading.describe()}")
        return DEFAULT_ACTION


def _with_reads(state: IncidentState, tools: Toolkit, diagnosis: Diagnosis, outputs: Mapping[str, str]) -> Diagnosis:
    """The diagnosis with what the reads printed among its outputs, read again."""
    merged = {**diagnosis.outputs, **outputs}
    context = tools.policy_context(state.failure)
    earlier_steps = tuple(result for attempt in state.attempts[:-1] for result in attempt.results)
    reading = read_failure(state.failure, merged, earlier_steps, functools.partial(package_dir, tools.policy, context))
    return dataclasses.replace(diagnosis, outputs=merged, reading=reading)
