"""The model's answer read: the reads it wants first (tool calls, or the JSON form's ``investigate``) or its plan,
found in fenced or chatty answers and past a reasoning model's thoughts, and what a model commonly writes (``a && b``,
a pipe into an output filter, a bare ``sudo``, a call of an allow-listed module) made the steps the guard judges.

An unusable answer is an :class:`LLMError`, which the planner turns into the offline plan.
"""

from __future__ import annotations

import dataclasses
import json
import re
from typing import Any, Mapping

from ansible_collections.sentinel.heal.plugins.module_utils._text import clip
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.answer_schema import MAX_STEPS, ProposedPlan
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.filters import split_pipeline
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.investigation import WHY_LIMIT, ReadRequest
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.llm import Completion, LLMError, ToolCall, brief

_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)
# A reasoning model's thoughts come first; a brace or a draft plan in them is not the answer (nor is a thinking or
# reasoning part of a content sent as parts: only its text parts are read).
_THINKING = re.compile(r"^\s*<(think|thinking|reasoning)>.*?(</\1>|\Z)", re.DOTALL | re.IGNORECASE)


def parse_answer(completion: Completion, *, init_service: str) -> ProposedPlan | tuple[ReadRequest, ...]:
    """The model's answer: the reads it wants first (as tool calls, or the JSON form's ``investigate``), or its plan."""
    if completion.tool_calls:
        return tuple(_read_call(index, call) for index, call in enumerate(completion.tool_calls))
    data = _first_json_object(completion.text)
    if isinstance(data, dict) and data.get("investigate") and not data.get("steps"):
        wanted = data["investigate"]
        if not isinstance(wanted, list):
            raise LLMError("'investigate' is a list of reads", field="answer.investigate", value=brief(json.dumps(wanted)))
        return tuple(_read_request(f"answer.investigate[{index}]", read) for index, read in enumerate(wanted))
    return parse_plan(completion.text, init_service=init_service)


def _read_call(index: int, call: ToolCall) -> ReadRequest:
    where = f"answer.tool_calls[{index}]"
    if call.name != "read":
        raise LLMError("the LLM called a tool that does not exist", field=f"{where}.function.name", value=brief(call.name),
                       hint="the one tool is read")
    try:
        arguments = json.loads(call.arguments or "{}")
    except json.JSONDecodeError:
        raise LLMError("a read's arguments are not JSON", field=f"{where}.function.arguments", value=brief(call.arguments)) from None
    return dataclasses.replace(_read_request(f"{where}.function.arguments", arguments), call_id=call.id)


def _read_request(where: str, read: Any) -> ReadRequest:
    """A read as the model wrote it: an argv of strings (empty ones included: the guard refuses what it cannot run, and
    the model is told why, so one bad read does not cost the answer its other reads)."""
    if isinstance(read, list):
        read = {"argv": read}
    if not isinstance(read, dict):
        raise LLMError("a read is an object with argv and why", field=where, value=brief(json.dumps(read)))
    argv = read.get("argv")
    if isinstance(argv, str):
        raise LLMError("argv must be a list of arguments, not a command line", field=f"{where}.argv", value=brief(argv))
    if not isinstance(argv, list) or not all(isinstance(a, str) for a in argv):
        raise LLMError("argv must be a list of strings", field=f"{where}.argv", value=brief(json.dumps(argv)))
    return ReadRequest(argv=tuple(argv), why=clip(str(read.get("why") or ""), WHY_LIMIT))


def parse_plan(text: str, *, init_service: str) -> ProposedPlan:
    """Read the model's JSON plan, tolerating code fences and prose around it."""
    data = _first_json_object(text)
    if not isinstance(data, dict):
        raise LLMError("the LLM's answer holds no JSON plan", field="answer", value=brief(text))
    escalate = data.get("escalate")
    raw_steps = data.get("steps") or []
    if not isinstance(raw_steps, list):
        raise LLMError("'steps' in the LLM's plan is not a list", field="answer.steps", value=brief(json.dumps(raw_steps)))
    normalised = [found for index, step in enumerate(raw_steps) for found in _normalised(_step_argv(index, step, init_service))]
    steps = tuple(argv for argv, _filters in normalised)
    if len(steps) > MAX_STEPS:
        raise LLMError(f"the LLM proposed more than {MAX_STEPS} steps", field="answer.steps", value=len(steps))
    if not steps and not escalate:
        raise LLMError("the LLM's plan has neither steps nor a reason to escalate", field="answer", value=brief(text))
    return ProposedPlan(
        diagnosis=str(data.get("diagnosis") or ""),
        steps=steps,
        rationale=str(data.get("rationale") or ""),
        expected_signal=str(data.get("expected_signal") or ""),
        escalate=str(escalate) if escalate else None,
        filters=tuple(filters for _argv, filters in normalised),
    )


def _first_json_object(text: str) -> Any:
    text = _THINKING.sub("", text, count=1)
    candidates = [match.group(1) for match in _FENCED.finditer(text)] + [text.strip()]
    start = text.find("{")
    if start >= 0:
        candidates.append(text[start:])
    decoder = json.JSONDecoder()
    for candidate in candidates:
        try:
            value, _end = decoder.raw_decode(candidate)
        except json.JSONDecodeError:
            continue
        if isinstance(value, dict):
            return value
    return None


def _step_argv(index: int, step: Any, init_service: str) -> tuple[str, ...]:
    """A step is an argv, or a call of an allow-listed module translated to the argv the guard judges."""
    where = f"answer.steps[{index}]"
    if isinstance(step, list):
        step = {"argv": step}
    if not isinstance(step, dict):
        raise LLMError("a step is an object with argv, or with module and args", field=where, value=brief(json.dumps(step)))
    if "argv" in step:
        argv = step["argv"]
        if isinstance(argv, str):
            raise LLMError("argv must be a list of arguments, not a command line", field=f"{where}.argv", value=brief(argv))
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise LLMError("argv must be a non-empty list of strings", field=f"{where}.argv", value=brief(json.dumps(argv)))
        return tuple(argv)
    return _module_argv(where, str(step.get("module", "")), step.get("args") or {}, init_service)


def _normalised(argv: tuple[str, ...]) -> list[tuple[tuple[str, ...], tuple[str, ...]]]:
    """What a model commonly writes, as the steps the guard judges, each with its output filters: ``a && b`` is two
    steps (a plan stops at a failed step, as ``&&`` does), ``a | tail -n 50`` runs ``a`` and keeps the last 50 lines of
    its output on the controller (only filters that read nothing else; any other pipe stays for the guard to refuse),
    and a bare leading ``sudo`` is dropped (the policy's rule decides who runs a step)."""
    steps: list[tuple[tuple[str, ...], tuple[str, ...]]] = []
    current: list[str] = []
    for word in (*argv, "&&"):
        if word != "&&":
            current.append(word)
            continue
        if current[:1] == ["sudo"] and len(current) > 1 and not current[1].startswith("-"):
            current = current[1:]
        if not current:
            raise LLMError("a step joins an empty command with &&", field="answer.steps", value=brief(" ".join(argv)))
        pipeline = split_pipeline(current)
        if pipeline is None:
            steps.append((tuple(current), ()))
        else:
            command, filters = pipeline
            steps.append((command, tuple(stage.written for stage in filters)))
        current = []
    return steps


_SERVICE_VERBS = {"started": "start", "stopped": "stop", "restarted": "restart", "reloaded": "reload"}


def _module_argv(where: str, module: str, args: Mapping[str, Any], init_service: str) -> tuple[str, ...]:
    name = module.removeprefix("ansible.builtin.")
    if name == "service" and args.get("state") in _SERVICE_VERBS:
        return ("service", str(args.get("name") or init_service), _SERVICE_VERBS[str(args["state"])])
    if name == "file" and args.get("state") == "absent" and args.get("path"):
        return ("rm", "-f", str(args["path"]))
    if name == "file" and args.get("state") == "directory" and args.get("path"):
        argv = ["install", "-d"]
        for option, key in (("-m", "mode"), ("-o", "owner"), ("-g", "group")):
            if args.get(key):
                argv += [option, str(args[key])]
        return (*argv, str(args["path"]))
    raise LLMError("the step calls a module outside the catalog", field=f"{where}.module", value=module,
                   hint="ansible.builtin.service (state started/stopped/restarted/reloaded) or ansible.builtin.file (state absent/directory)")
