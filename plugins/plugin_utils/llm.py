"""The LLM: any OpenAI-compatible chat-completions endpoint, through the ``openai`` package.

OpenAI, Azure OpenAI, Ollama, vLLM, llama.cpp's server: anything that speaks chat completions.
Retries with backoff on 429 and 5xx (honouring Retry-After), a timeout per request, and a token
budget per incident. The answer is a JSON plan; a tolerant parser finds it in fenced or chatty
answers, and an unusable answer is an :class:`LLMError` the planner turns into the offline plan.
The API key never leaves this module: not in errors, not in reprs, not in results.
"""

from __future__ import annotations

import email.utils
import json
import random
import re
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.module_utils._text import clip
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import SentinelError

MAX_STEPS = 3
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
_FENCED = re.compile(r"```(?:json)?\s*(\{.*?\})\s*```", re.DOTALL)
# A reasoning model's thoughts come first; a brace or a draft plan in them is not the answer.
_THINKING = re.compile(r"^\s*<(think|thinking|reasoning)>.*?(</\1>|\Z)", re.DOTALL | re.IGNORECASE)

PLAN_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["steps"],
    "properties": {
        "diagnosis": {"type": "string", "description": "what is wrong, in one or two sentences"},
        "steps": {
            "type": "array", "maxItems": MAX_STEPS,
            "items": {"type": "object", "properties": {
                "argv": {"type": "array", "items": {"type": "string"}, "description": "a command as an argument vector, run without a shell"},
                "module": {"type": "string", "enum": ["ansible.builtin.service", "ansible.builtin.file"]},
                "args": {"type": "object"},
            }},
        },
        "rationale": {"type": "string"},
        "expected_signal": {"type": "string", "description": "what shows the service recovered"},
        "escalate": {"type": ["string", "null"], "description": "why no safe fix exists, instead of steps"},
    },
}


class LLMError(SentinelError):
    """The LLM could not give a usable plan (down, slow, over budget, or an unusable answer)."""


@dataclass(frozen=True)
class LLMSettings:
    model: str
    base_url: str | None = None
    api_key: str | None = field(default=None, repr=False)
    timeout: float = 30.0
    max_retries: int = 3
    backoff: float = 1.0
    token_budget: int = 6000
    json_mode: bool = True

    def __post_init__(self) -> None:
        if not self.model:
            raise LLMError("an LLM needs a model name", field="llm.model", value=self.model)
        if self.timeout <= 0 or self.max_retries < 0 or self.token_budget < 500:
            limits = {"timeout": self.timeout, "max_retries": self.max_retries, "token_budget": self.token_budget}
            raise LLMError("invalid LLM limits", field="llm", value=limits, hint="timeout > 0, max_retries >= 0, token_budget >= 500")


@dataclass
class TokenBudget:
    """Tokens one incident may spend on the LLM, over all its attempts."""

    limit: int
    spent: int = 0

    def allows(self, estimated_prompt_tokens: int) -> bool:
        return self.spent + estimated_prompt_tokens <= self.limit

    def charge(self, tokens: int) -> None:
        self.spent += tokens


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    attempts: int


@dataclass(frozen=True)
class ProposedPlan:
    diagnosis: str
    steps: tuple[tuple[str, ...], ...]
    rationale: str
    expected_signal: str
    escalate: str | None


def estimate_tokens(text: str) -> int:
    """About four characters per token for English and logs; errs on the high side for short words."""
    return len(text) // 4 + 1


class LLMClient:
    def __init__(self, settings: LLMSettings, *, sleep: Callable[[float], None] = time.sleep) -> None:
        import openai  # imported here: only configured LLMs pay for loading it

        self.settings = settings
        self._openai = openai
        self._sleep = sleep
        self._client = openai.OpenAI(
            base_url=settings.base_url, api_key=settings.api_key or "not-needed", timeout=settings.timeout, max_retries=0,
        )
        # a server that refused response_format (HTTP 400, or llama.cpp's 500) is asked without it from then on
        self._json_mode = settings.json_mode

    def complete(self, messages: Sequence[Mapping[str, str]], budget: TokenBudget) -> Completion:
        estimated = sum(estimate_tokens(m["content"]) for m in messages)
        if not budget.allows(estimated):
            raise LLMError("the incident's token budget is spent", field="token_budget", value=budget.limit,
                           hint=f"{budget.spent} tokens spent, this prompt needs about {estimated}")
        attempt = 0
        while attempt <= self.settings.max_retries:
            attempt += 1
            extra: dict[str, Any] = {"response_format": {"type": "json_object"}} if self._json_mode else {}
            try:
                response = self._client.chat.completions.create(
                    model=self.settings.model, messages=list(messages), temperature=0, **extra,  # type: ignore[arg-type]
                )
            except self._openai.APIStatusError as exc:
                if self._json_mode and exc.status_code in (400, 422, 500) and "response_format" in str(exc.message):
                    self._json_mode = False  # the server does not take it: ask again, at once, without it
                    attempt -= 1
                    continue
                if exc.status_code not in RETRYABLE_STATUS or attempt > self.settings.max_retries:
                    raise LLMError(f"the LLM answered HTTP {exc.status_code}", field="llm.base_url", value=self.settings.base_url,
                                   hint=_brief(exc.message)) from None
                self._sleep(self._delay(attempt, exc.response.headers.get("retry-after")))
                continue
            except (self._openai.APITimeoutError, self._openai.APIConnectionError) as exc:
                if attempt > self.settings.max_retries:
                    kind = "did not answer in time" if isinstance(exc, self._openai.APITimeoutError) else "cannot be reached"
                    raise LLMError(f"the LLM {kind}", field="llm.base_url", value=self.settings.base_url,
                                   hint=f"timeout {self.settings.timeout}s, {attempt} attempts") from None
                self._sleep(self._delay(attempt, None))
                continue
            except self._openai.APIError as exc:  # a body the client cannot read as a response
                raise LLMError("the LLM's answer is not a chat completion", field="llm.base_url", value=self.settings.base_url,
                               hint=_brief(str(exc))) from None
            return _completion(response, estimated, attempt, budget)
        raise AssertionError("unreachable: the loop returns or raises")

    def _delay(self, attempt: int, retry_after: str | None) -> float:
        """Seconds to wait before the next attempt: what Retry-After says (seconds or an HTTP date), at most 30 s, or
        an exponential backoff with jitter."""
        if retry_after:
            try:
                return min(max(float(retry_after), 0.0), 30.0)
            except ValueError:
                pass
            try:
                when = email.utils.parsedate_to_datetime(retry_after).timestamp()
            except (TypeError, ValueError, IndexError):
                when = None
            if when is not None:
                return min(max(when - time.time(), 0.0), 30.0)
        jitter = 0.5 + random.random()
        return float(self.settings.backoff * (2 ** (attempt - 1)) * jitter)


def _completion(response: Any, estimated: int, attempt: int, budget: TokenBudget) -> Completion:
    """The text of a chat completion, charged to the budget; an answer that is no chat completion (a proxy's page, a
    JSON array, a null message) or one cut at its token limit is an LLMError."""
    try:
        choice = response.choices[0]
        text = choice.message.content
        finish_reason = getattr(choice, "finish_reason", None)
        usage = response.usage
    except (AttributeError, IndexError, TypeError):
        raise LLMError("the LLM's answer is not a chat completion", field="answer", value=_brief(str(response))) from None
    prompt_tokens = getattr(usage, "prompt_tokens", None) or estimated
    completion_tokens = getattr(usage, "completion_tokens", None) or 0
    budget.charge(prompt_tokens + completion_tokens)
    if finish_reason == "length":
        raise LLMError("the LLM's answer was cut at its token limit (finish_reason length)", field="answer", value=_brief(str(text or "")))
    if not isinstance(text, str):
        raise LLMError("the LLM's answer holds no message text", field="answer.choices[0].message", value=_brief(str(choice)))
    return Completion(text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, attempts=attempt)


def parse_plan(text: str, *, init_service: str) -> ProposedPlan:
    """Read the model's JSON plan, tolerating code fences and prose around it."""
    data = _first_json_object(text)
    if not isinstance(data, dict):
        raise LLMError("the LLM's answer holds no JSON plan", field="answer", value=_brief(text))
    escalate = data.get("escalate")
    raw_steps = data.get("steps") or []
    if not isinstance(raw_steps, list):
        raise LLMError("'steps' in the LLM's plan is not a list", field="answer.steps", value=_brief(json.dumps(raw_steps)))
    if len(raw_steps) > MAX_STEPS:
        raise LLMError(f"the LLM proposed more than {MAX_STEPS} steps", field="answer.steps", value=len(raw_steps))
    steps = tuple(_step_argv(index, step, init_service) for index, step in enumerate(raw_steps))
    if not steps and not escalate:
        raise LLMError("the LLM's plan has neither steps nor a reason to escalate", field="answer", value=_brief(text))
    return ProposedPlan(
        diagnosis=str(data.get("diagnosis") or ""),
        steps=steps,
        rationale=str(data.get("rationale") or ""),
        expected_signal=str(data.get("expected_signal") or ""),
        escalate=str(escalate) if escalate else None,
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
        raise LLMError("a step is an object with argv, or with module and args", field=where, value=_brief(json.dumps(step)))
    if "argv" in step:
        argv = step["argv"]
        if isinstance(argv, str):
            raise LLMError("argv must be a list of arguments, not a command line", field=f"{where}.argv", value=_brief(argv))
        if not isinstance(argv, list) or not argv or not all(isinstance(a, str) for a in argv):
            raise LLMError("argv must be a non-empty list of strings", field=f"{where}.argv", value=_brief(json.dumps(argv)))
        return tuple(argv)
    return _module_argv(where, str(step.get("module", "")), step.get("args") or {}, init_service)


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


def _brief(text: str) -> str:
    """Enough of a value for an error message."""
    return clip(text, 200)
