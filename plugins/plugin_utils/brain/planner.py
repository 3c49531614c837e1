"""The planner: memory first, then runbooks, then the LLM, then a generic restart; or, before it plans, reads.

Sources are tried in order of trust. A fix verified before for the same failure fingerprint comes
from memory; otherwise the most specific runbook whose match holds on the evidence; otherwise the
LLM, when one is configured, grounded in the evidence, memory and knowledge; otherwise the fallback
runbooks (priority 0 or lower) and a restart of the service - one such blind plan at most per failure, which a second
could not heal where the first failed. A plan whose steps already failed for this fingerprint is not tried again while
the cause it failed on holds (brain/cause.py); a remembered fix is replayed only on the facts it was verified on; when
no untried plan is left the incident is escalated with what the evidence says went wrong. When
the LLM is down, slow, over budget or answers nonsense, the offline sources plan and the plan says so.
"""

from __future__ import annotations

import re
import shlex
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.module_utils._text import clip
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.answer_parsing import parse_answer
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.answer_schema import ProposedPlan
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.cause import cause_of, describe
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.investigation import (
    MAX_READS_PER_ROUND,
    NO_THINKING,
    Investigation,
    ReadRequest,
    Thinking,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.llm import LLMClient, LLMError, TokenBudget
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.placeholders import NotApplicable, placeholder_values, render_step, render_text
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.prompts import KnowledgeSource, build_messages, knowledge_query
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.reading import NOTHING_READ, Reading
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import Runbook, RunbookLibrary
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure, Plan, PlanSource, Step
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory, RememberedFix

GENERIC_RESTART = "service {init_service} restart"
# what fixes an answer that is no plan: the model, or a server that holds it to the plan's shape
UNUSABLE_ANSWER = "ask a model that follows the plan's JSON format (llm.model), or let the server constrain its answer to it (llm.schema)"
KNOWLEDGE_K = 3


@dataclass(frozen=True)
class Diagnosis:
    """What diagnosis concluded before planning: the remembered fix, if any, and evidence outputs."""

    text: str
    remembered: RememberedFix | None
    outputs: Mapping[str, str]
    reading: Reading = NOTHING_READ


@dataclass
class LLMUse:
    """What the LLM cost an incident, and why it was not used when it was not."""

    budget: TokenBudget
    calls: int = 0
    prompt_tokens: list[int] = field(default_factory=list)
    # why the LLM gave no plan this time, naming the LLM (model, where): the offline planner then planned
    fallback: str | None = None


def stood_in(failed: str) -> str:
    """How a plan, the timeline and an escalation say that the offline planner planned because the LLM failed
    (``failed``: :attr:`LLMUse.fallback`)."""
    return f"{failed}; the offline planner stood in"


class Planner:
    def __init__(
        self,
        runbooks: RunbookLibrary,
        memory: Memory | None,
        *,
        llm: LLMClient | None = None,
        knowledge: KnowledgeSource | None = None,
        secrets: Sequence[str] = (),
    ) -> None:
        self.runbooks = runbooks
        self.memory = memory
        self.llm = llm
        self.knowledge = knowledge
        self.secrets = tuple(secrets)

    def remembered_fix(self, failure: Failure, excluded: AbstractSet[tuple[str, ...]], results: Mapping[str, Mapping[str, Any]],
                       relapsed: tuple[str, ...] | None = None) -> tuple[RememberedFix | None, str]:
        """The fix verified before for this fingerprint, when it was verified on the failure there is now (the same facts
        of trouble in ``failure``'s evidence and the evidence commands' ``results``) and is not the plan whose heal the
        failure relapsed from (``relapsed``, its templates), and why a remembered fix was sent away before it ran ("" when
        none was)."""
        remembered = self.memory.verified_fix(failure.fingerprint) if self.memory else None
        if remembered is None or remembered.plan.templates in excluded:
            return None, ""
        if remembered.plan.templates == relapsed:
            return None, (f"{failure.service}: the fix remembered from episode {remembered.episode_id} ({remembered.plan.rationale}) is "
                          f"the one that relapsed: not replayed as verified")
        then, now = cause_of(remembered.evidence, remembered.results), cause_of(failure.evidence, results)
        if then != now:
            return None, (f"{failure.service}: the fix remembered from episode {remembered.episode_id} ({remembered.plan.rationale}) was verified on "
                          f"{describe(then)}, and now {describe(now)}: not replayed")
        return remembered, ""

    def evidence_commands(self, failure: Failure) -> list[str]:
        """Read-only commands the candidate runbooks (and, with an LLM, a general look) want to see, each once."""
        commands: dict[str, None] = {}
        for runbook in self.runbooks.candidates(failure):
            commands.update(dict.fromkeys(runbook.evidence_commands))
        if self.llm is not None:
            if failure.spec.get("ports"):
                commands["ss -ltnp"] = None
            if failure.spec.get("logs"):
                commands[f"tail -n 30 {shlex.quote(str(failure.spec['logs'][0]))}"] = None
            if failure.facts.get("service_manager") == "systemd":
                commands[f"journalctl -u {shlex.quote(failure.unit or failure.init_service)} -n 30 --no-pager"] = None
        return list(commands)[:4]

    def evidence_commands_ahead(self, service: Failure) -> list[str]:
        """The evidence commands the service's runbooks may want, whatever its failure turns out to be (``service``:
        the declared service, before any check), each once."""
        return list(dict.fromkeys(command for runbook in self.runbooks.runbooks if runbook.serves(service)
                                  for command in runbook.evidence_commands))

    def plan(self, failure: Failure, diagnosis: Diagnosis, excluded: AbstractSet[tuple[str, ...]], llm_use: LLMUse | None = None,
             thinking: Thinking = NO_THINKING, time_left: float | None = None) -> Plan | Investigation:
        """A plan, or the reads wanted first. ``time_left``: seconds the incident has left (an LLM call gets no more)."""
        if diagnosis.remembered is not None:
            remembered = diagnosis.remembered.plan
            # a runbook's own placeholders (vars) are filled again from the new incident, by the runbook the plan came from
            origin = self.runbooks.planned_by(remembered)
            variables = origin.variable_values(failure, diagnosis.outputs, diagnosis.reading) if origin is not None else {}
            try:
                steps = tuple(render_step(step.template, failure, step.may_fail, diagnosis.reading, extra=variables)
                              for step in remembered.steps)
            except NotApplicable:
                pass
            else:
                return Plan(source=PlanSource.MEMORY, reference=remembered.reference, rationale=remembered.rationale, steps=steps,
                            origin=remembered.origin)
        matching = sorted(
            (rb for rb in self.runbooks.candidates(failure)
             if rb.matches(failure, diagnosis.outputs, diagnosis.reading) and rb.templates not in excluded),
            key=lambda rb: rb.specificity, reverse=True,
        )
        plan = self._from_runbooks([rb for rb in matching if rb.priority > 0], failure, diagnosis, excluded)
        if plan is not None:
            return plan
        if thinking.rounds_left > 0:
            follow_up = self._follow_up(failure, diagnosis, thinking)
            if follow_up is not None:
                return follow_up
        note = ""
        if self.llm is not None and llm_use is not None:
            try:
                return self._from_llm(failure, diagnosis, excluded, llm_use, thinking, time_left)
            except LLMError as exc:
                llm_use.fallback = f"{self.llm.settings.described} failed: {exc}"
                note = f" ({stood_in(llm_use.fallback)})"
        # a failure nobody foresaw gets one blind start or restart at most: a second cannot help where the first failed
        blind = {(GENERIC_RESTART,)} | {rb.templates for rb in self.runbooks.candidates(failure) if rb.priority <= 0}
        if not blind & set(excluded):
            plan = self._from_runbooks([rb for rb in matching if rb.priority <= 0], failure, diagnosis, excluded, note)
            if plan is not None:
                return plan
            return Plan(
                source=PlanSource.GENERIC, reference="restart", rationale="no runbook matched: restart the service" + note,
                steps=(render_step(GENERIC_RESTART, failure, reading=diagnosis.reading),),
            )
        tried = "; ".join(" && ".join(render_text(template, failure, {}, diagnosis.reading) for template in templates)
                          for templates in sorted(excluded))
        return Plan(
            source=PlanSource.GENERIC, reference="exhausted", rationale="no untried plan is left" + note,
            escalation=(f"{failure.service}: every known plan was tried without a verified recovery ({tried}), and no runbook knows "
                        f"this failure, so it is not restarted blindly again; what it says: {evidence_digest(failure, diagnosis.reading)}; a person "
                        "should fix that cause, and the next run verifies it"),
        )

    def _from_runbooks(
        self, runbooks: Sequence[Runbook], failure: Failure, diagnosis: Diagnosis, excluded: AbstractSet[tuple[str, ...]], note: str = "",
    ) -> Plan | None:
        for runbook in runbooks:
            try:
                if runbook.escalate:
                    escalation = runbook.render_escalation(failure, diagnosis.outputs, diagnosis.reading)
                    return Plan(source=PlanSource.RUNBOOK, reference=runbook.id, rationale=runbook.title + note, escalation=escalation)
                steps = runbook.render_steps(failure, diagnosis.reading, diagnosis.outputs)
            except NotApplicable:
                continue
            if tuple(step.template for step in steps) in excluded:  # without its optional steps, it already failed
                continue
            return Plan(source=PlanSource.RUNBOOK, reference=runbook.id, rationale=runbook.title + note, steps=steps)
        return None

    def _follow_up(self, failure: Failure, diagnosis: Diagnosis, thinking: Thinking) -> Investigation | None:
        """The follow-up reads of the most specific runbook that has any left to read, as an investigation."""
        done = set(diagnosis.outputs) | thinking.read_commands
        for runbook in sorted(self.runbooks.candidates(failure), key=lambda rb: rb.specificity, reverse=True):
            wanted = [ReadRequest(argv=tuple(shlex.split(command)), why=why)
                      for command, why in runbook.follow_up_reads(failure, diagnosis.outputs, diagnosis.reading) if command not in done]
            if wanted:
                return Investigation(requests=tuple(wanted[:MAX_READS_PER_ROUND]), source=PlanSource.RUNBOOK, reference=runbook.id)
        return None

    def _from_llm(self, failure: Failure, diagnosis: Diagnosis, excluded: AbstractSet[tuple[str, ...]], llm_use: LLMUse,
                  thinking: Thinking, time_left: float | None) -> Plan | Investigation:
        llm = self.llm
        if llm is None:
            raise LLMError("no LLM is configured", field="llm", value=None)
        asked = {read.request.command for round_ in thinking.rounds if round_.investigation.source is PlanSource.LLM for read in round_.reads}
        messages = build_messages(
            failure,
            # what the model asked to read is in the conversation, as the answers to its requests
            outputs={command: output for command, output in diagnosis.outputs.items() if command not in asked},
            similar_fixes=self.memory.similar_fixes(failure) if self.memory else [],
            failed_plans=sorted(excluded),
            knowledge=self.knowledge.query(knowledge_query(failure), k=KNOWLEDGE_K) if self.knowledge else [],
            secrets=self.secrets,
            thinking=thinking,
            read_form=llm.read_form,
        )
        may_read = "offered" if thinking.rounds_left > 0 else "closed" if asked else ""
        if time_left is not None and time_left <= 0:
            raise LLMError("the incident's deadline passed before the LLM was asked", field="incident_timeout", value=round(time_left, 1))
        completion = llm.complete(messages, llm_use.budget, reads=may_read, time_left=time_left)
        llm_use.calls += 1
        llm_use.prompt_tokens.append(completion.prompt_tokens)
        try:
            answer = parse_answer(completion, init_service=failure.init_service)
        except LLMError as exc:
            raise LLMError(exc.message, field=exc.field, value=exc.value, hint=exc.hint or UNUSABLE_ANSWER) from None
        model = llm.settings.model
        if not isinstance(answer, ProposedPlan):
            if thinking.rounds_left > 0:
                return Investigation(requests=answer, source=PlanSource.LLM, reference=model, said=completion.text)
            return Plan(source=PlanSource.LLM, reference=model, rationale="the LLM asked to read more instead of planning",
                        escalation=(f"{failure.service}: the LLM still asked to read ({'; '.join(r.command for r in answer[:MAX_READS_PER_ROUND])}) "
                                    f"after {len(thinking.rounds)} round(s) of reads, the most an attempt has, and gave no plan; what it read: "
                                    f"{thinking.what_was_read()}; what the service says: {evidence_digest(failure, diagnosis.reading)}"))
        proposed = answer
        rationale = "; ".join(part for part in (proposed.diagnosis, proposed.rationale) if part) or "proposed by the LLM"
        if proposed.escalate:
            read = f"; what it read: {thinking.what_was_read()}" if thinking.rounds else ""
            return Plan(source=PlanSource.LLM, reference=model, rationale=rationale,
                        escalation=(f"the LLM escalates: {proposed.escalate}{read}; what the service says: "
                                    f"{evidence_digest(failure, diagnosis.reading)}"))
        steps = tuple(Step(template=_templated(argv, failure), argv=argv, output_filters=output_filters)
                      for argv, output_filters in zip(proposed.steps, proposed.filters, strict=True))
        if tuple(step.template for step in steps) in excluded:
            raise LLMError("the LLM proposed a plan that already failed for this failure", field="answer.steps",
                           value=[step.command for step in steps])
        return Plan(source=PlanSource.LLM, reference=model, rationale=rationale, steps=steps)


def _templated(argv: Sequence[str], failure: Failure) -> str:
    """Turn the incident's own values back into placeholders, so a remembered LLM fix is replayed
    with the next incident's pid and paths, not this one's."""
    by_value = {value: name for name, value in placeholder_values(failure).items()}
    return " ".join(f"{{{by_value[arg]}}}" if arg in by_value else shlex.quote(arg) for arg in argv)


# what evidence_digest says when the evidence holds no error line
NOTHING_SAID = "no error line in its status or log (see its log)"
# the lines of a service's output that say what went wrong (also what the report quotes of a failed step)
ERROR_LINE = re.compile(r"error|fail|fatal|denied|no such file|cannot|can't|invalid|emerg|crit|refused|not found|no space", re.IGNORECASE)


def evidence_digest(failure: Failure, reading: Reading = NOTHING_READ, *, lines: int = 3) -> str:
    """What the evidence says went wrong, in the service's own words: the reading's decisive line, the journal's cause,
    the error lines of its status and logs, who holds its ports, what is missing, which filesystem is full."""
    evidence = failure.evidence
    said: list[str] = [reading.describe()] if reading.decisive else []
    unit = evidence.get("unit") or {}
    step = unit.get("failed_step") or {}
    if unit.get("cause"):
        said.append(f'"{unit["cause"]}"')
    elif step:  # the journal names no cause (a check of an ExecStartPre= prints nothing): the step that failed does
        drop_ins = f" (its drop-ins: {unit['DropInPaths']})" if unit.get("DropInPaths") else ""
        said.append(f"{step.get('step')} {step.get('path')} {step.get('code')} with status {step.get('status')}{drop_ins}")
    texts = [str((evidence.get("status") or {}).get("output") or ""), *(str(text) for text in (evidence.get("logs") or {}).values())]
    for text in texts:
        said += [f'"{line.strip()}"' for line in text.splitlines() if ERROR_LINE.search(line) and f'"{line.strip()}"' not in said]
    said = [clip(line, 160) for line in said[:lines]]
    said += [f"port {owner.get('port')} is held by {owner.get('process')} (pid {owner.get('pid')})" for owner in evidence.get("port_owners") or []]
    said += [f"{path.get('path')} is missing" for path in evidence.get("paths") or [] if path.get("exists") is False]
    said += [f"the filesystem of {disk.get('path')} is full" for disk in evidence.get("disk") or []
             if disk.get("full") or disk.get("inodes_exhausted")]
    return "; ".join(said) or NOTHING_SAID
