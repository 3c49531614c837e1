"""The answer asked of the LLM: the plan's JSON schema (each step in a shape the planner can use), the think loop's
reads (as JSON, or as a tool to call), the forms in which a server takes them, and the plan it answers.

The schema and answer_parsing.py change together: a server that turns the schema into a grammar (llama.cpp, Ollama,
vLLM) admits only the answers the parser reads.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.investigation import MAX_READS_PER_ROUND

MAX_STEPS = 3

# A step in each shape parse_plan reads, each complete: a server that turns the schema into a grammar (llama.cpp, Ollama,
# vLLM) then admits only steps the planner can use. With any object as args, SmolLM2-135M's steps had, every time, a
# state no module takes ("started|stopped|restarted|reloaded", copied from the prompt) or no args at all.
_STEP_SHAPES: list[dict[str, Any]] = [
    {"type": "object", "required": ["argv"], "properties": {
        "argv": {"type": "array", "minItems": 1, "items": {"type": "string"}, "description": "a command as an argument vector, run without a shell"},
    }},
    {"type": "object", "required": ["module", "args"], "properties": {
        "module": {"type": "string", "enum": ["ansible.builtin.service"]},
        "args": {"type": "object", "required": ["name", "state"], "properties": {
            "name": {"type": "string"}, "state": {"type": "string", "enum": ["started", "stopped", "restarted", "reloaded"]},
        }},
    }},
    {"type": "object", "required": ["module", "args"], "properties": {
        "module": {"type": "string", "enum": ["ansible.builtin.file"]},
        "args": {"type": "object", "required": ["path", "state"], "properties": {
            "path": {"type": "string"}, "state": {"type": "string", "enum": ["absent", "directory"]},
            "owner": {"type": "string"}, "group": {"type": "string"}, "mode": {"type": "string"},
        }},
    }},
]

PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["steps"],
    "properties": {
        "diagnosis": {"type": "string", "description": "what is wrong, in one or two sentences"},
        "steps": {"type": "array", "maxItems": MAX_STEPS, "items": {"anyOf": _STEP_SHAPES}},
        "rationale": {"type": "string"},
        "expected_signal": {"type": "string", "description": "what shows the service recovered"},
        "escalate": {"type": ["string", "null"], "description": "why no safe fix exists, instead of steps"},
    },
}


_READ_ARGUMENTS: dict[str, Any] = {
    "type": "object",
    "required": ["argv", "why"],
    "properties": {
        "argv": {"type": "array", "minItems": 1, "items": {"type": "string", "minLength": 1},
                 "description": "a read-only command as an argument vector, run without a shell"},
        "why": {"type": "string", "description": "what it should show, in one sentence"},
    },
}
# The JSON form of the think loop: instead of a plan, the reads wanted first.
INVESTIGATE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["investigate"],
    "properties": {"investigate": {"type": "array", "minItems": 1, "maxItems": MAX_READS_PER_ROUND, "items": _READ_ARGUMENTS}},
}
# The tool form of the think loop (OpenAI tool calling).
READ_TOOL: dict[str, Any] = {
    "type": "function",
    "function": {
        "name": "read",
        "description": "Run one read-only command on the failed host before planning (status, journal, files, sockets, processes). "
                       "It runs only when the policy allows it as a read; otherwise you are told why.",
        "parameters": _READ_ARGUMENTS,
    },
}

# How a server takes the plan's JSON schema (structured outputs: what makes small local models answer valid plans).
SCHEMA_FORMS = ("none", "openai", "llamacpp", "ollama")
# How the think loop's reads are asked for: OpenAI tool calling, or the JSON form; auto picks by the schema form.
READ_FORMS = ("auto", "tools", "json")


def answer_format(json_mode: bool, schema: str, *, may_investigate: bool = False) -> dict[str, Any]:
    """The request's keywords that ask for the answer's shape: the plan's schema in the form the server takes (OpenAI's
    ``json_schema``, llama.cpp's ``json_object`` with ``schema``, Ollama's ``format``), or only JSON, or nothing. When
    the JSON form of the think loop may answer, the schema is a plan or the reads wanted first."""
    shape: dict[str, Any] = {"anyOf": [PLAN_SCHEMA, INVESTIGATE_SCHEMA]} if may_investigate else PLAN_SCHEMA
    if schema == "openai":
        return {"response_format": {"type": "json_schema", "json_schema": {"name": "plan", "schema": shape, "strict": False}}}
    if schema == "llamacpp":
        return {"response_format": {"type": "json_object", "schema": shape}}
    if schema == "ollama":
        return {"extra_body": {"format": shape}}
    return {"response_format": {"type": "json_object"}} if json_mode else {}


@dataclass(frozen=True)
class ProposedPlan:
    diagnosis: str
    steps: tuple[tuple[str, ...], ...]
    rationale: str
    expected_signal: str
    escalate: str | None
    # per step, the output filters its pipe named (brain/filters.py), as written; () when it had none
    filters: tuple[tuple[str, ...], ...]
