"""The LLM: any OpenAI-compatible chat-completions endpoint, through the ``openai`` package.

OpenAI, Azure OpenAI, Ollama, vLLM, llama.cpp's server: anything that speaks chat completions.
Retries with backoff on 429 and 5xx (honouring Retry-After), a timeout per request, and a token
budget per incident. The answer's text is read from the completion (or from the text parts of a content sent as
parts); what is asked of it is answer_schema.py's, how it is read answer_parsing.py's. A failure, a body that is not
UTF-8 JSON included, is an :class:`LLMError` the planner turns into the offline plan.
The API key never leaves this module: not in errors, not in reprs, not in results.
"""

from __future__ import annotations

import email.utils
import functools
import json
import random
import re
import threading
import time
import urllib.parse
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.module_utils._text import clip
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.answer_schema import READ_FORMS, READ_TOOL, SCHEMA_FORMS, answer_format
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import SentinelError

# bytes (or characters) quoted either side of where a body stops being UTF-8 JSON
EXCERPT_SIDE = 24
RETRYABLE_STATUS = frozenset({408, 409, 429, 500, 502, 503, 504})
# Azure OpenAI's classic URL: the deployment in the path, the API version in the query
_AZURE_DEPLOYMENT = re.compile(r"^(?P<endpoint>https?://[^/]+)/openai/deployments/(?P<deployment>[^/?]+)/?\?(?:.*&)?api-version=(?P<version>[^&]+)")


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
    schema: str = "none"
    reads: str = "auto"

    def __post_init__(self) -> None:
        if not self.model:
            raise LLMError("an LLM needs a model name", field="llm.model", value=self.model,
                           hint="name the model the server serves (the role's autoheal_llm.model), or leave llm out for the offline planner")
        if self.base_url is not None:
            parts = urllib.parse.urlsplit(self.base_url)
            if parts.scheme not in ("http", "https") or not parts.hostname:
                raise LLMError("the LLM's base_url is not an http(s) URL", field="llm.base_url", value=self.base_url,
                               hint="the API's root, as http://HOST:PORT/v1 (the role's autoheal_llm.base_url), or leave it out for OpenAI's own")
        if self.schema not in SCHEMA_FORMS:
            raise LLMError("unknown way to send the plan's schema", field="llm.schema", value=self.schema, hint=f"one of {', '.join(SCHEMA_FORMS)}")
        if self.reads not in READ_FORMS:
            raise LLMError("unknown way to ask for reads", field="llm.reads", value=self.reads, hint=f"one of {', '.join(READ_FORMS)}")
        if self.timeout <= 0 or self.max_retries < 0 or self.token_budget < 500:
            limits = {"timeout": self.timeout, "max_retries": self.max_retries, "token_budget": self.token_budget}
            raise LLMError("invalid LLM limits", field="llm", value=limits, hint="timeout > 0, max_retries >= 0, token_budget >= 500")

    @property
    def endpoint(self) -> str:
        """Where the LLM is asked, as a person reads it."""
        return self.base_url or "OpenAI's default endpoint (llm.base_url unset)"

    @property
    def described(self) -> str:
        """The LLM as a failure names it: its model and where it was asked (never its key)."""
        return f"the LLM (model {self.model} at {self.endpoint})"


# A plan is a few hundred tokens; a reasoning model's preamble may take more.
MAX_ANSWER_TOKENS = 2048
MIN_ANSWER_TOKENS = 256
ANSWER_CAP_NAMES = ("max_tokens", "max_completion_tokens")


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
class ToolCall:
    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class Completion:
    text: str
    prompt_tokens: int
    completion_tokens: int
    attempts: int
    tool_calls: tuple[ToolCall, ...] = ()


def estimate_tokens(text: str) -> int:
    """About four characters per token for English and logs; errs on the high side for short words."""
    return len(text) // 4 + 1


class LLMClient:
    def __init__(self, settings: LLMSettings, *, sleep: Callable[[float], None] = time.sleep) -> None:
        import openai  # imported here: only configured LLMs pay for loading it

        self.settings = settings
        self._openai = openai
        self._sleep = sleep
        azure = _AZURE_DEPLOYMENT.match(settings.base_url or "")
        self._client = openai.AzureOpenAI(
            azure_endpoint=azure["endpoint"], azure_deployment=azure["deployment"], api_version=azure["version"],
            api_key=settings.api_key or "not-needed", timeout=settings.timeout, max_retries=0,
        ) if azure else openai.OpenAI(
            base_url=settings.base_url, api_key=settings.api_key or "not-needed", timeout=settings.timeout, max_retries=0,
        )
        # a server that refused the answer's format (HTTP 400, or llama.cpp's 500) is asked without it from then on
        self._format_refused = False
        # the think loop's reads as tool calls, unless the schema form names a local server that constrains the answer's
        # grammar (the JSON form then fits the schema), or the server refused tools (from then on)
        self.read_form = settings.reads if settings.reads != "auto" else "json" if settings.schema in ("llamacpp", "ollama") else "tools"
        # the name the server takes for the answer's length cap: OpenAI's reasoning models refuse max_tokens and want
        # max_completion_tokens; a server that takes neither is asked without a cap
        self._cap_names = list(ANSWER_CAP_NAMES)

    def complete(self, messages: Sequence[Mapping[str, Any]], budget: TokenBudget, *, reads: str = "",
                 time_left: float | None = None) -> Completion:
        """One chat completion. ``reads``: "offered" when the model may ask for reads instead of a plan, "closed" when a
        conversation with reads must now end in a plan, "" when there are none. ``time_left``: seconds the incident has
        left, when they are fewer than the call's own timeout."""
        estimated = sum(estimate_tokens(str(m.get("content") or "") + json.dumps(m.get("tool_calls") or "")) for m in messages)
        if not budget.allows(estimated):
            raise LLMError("the incident's token budget is spent", field="llm.token_budget", value=budget.limit,
                           hint=f"{budget.spent} tokens spent, this prompt needs about {estimated}")
        # one deadline for the whole call, retries and waits included, whatever the server does (a body trickled byte
        # by byte passes every per-read timeout)
        deadline = time.monotonic() + min(self.settings.timeout, self.settings.timeout if time_left is None else max(time_left, 0.0))
        attempt = 0
        while attempt <= self.settings.max_retries:
            attempt += 1
            left = deadline - time.monotonic()
            try:
                # the raw response: its status and body say what was wrong when the body cannot be read
                raw = self._before(deadline, attempt, functools.partial(
                    self._client.chat.completions.with_raw_response.create, model=self.settings.model, messages=list(messages), temperature=0,
                    timeout=max(left, 0.1), **self._shape(reads), **self._cap(budget, estimated),
                ))
            except self._openai.APIStatusError as exc:
                if self._cap_names and exc.status_code in (400, 422) and self._cap_names[0] in str(exc.message):
                    self._cap_names.pop(0)  # the server does not take that name: ask again, at once, with the next
                    attempt -= 1
                    continue
                refuses_tools = re.search(r"\btools?\b|tool_choice|function", str(exc.message), re.IGNORECASE)
                if reads and self.read_form == "tools" and exc.status_code in (400, 422, 500) and refuses_tools:
                    self.read_form = "json"  # the server does not take tools: ask again, at once, in the JSON form
                    attempt -= 1
                    continue
                if self._shape(reads).keys() - {"tools", "tool_choice"} and exc.status_code in (400, 422, 500) \
                        and re.search(r"response_format|format|schema", str(exc.message)):
                    self._format_refused = True  # the server does not take it: ask again, at once, without it
                    attempt -= 1
                    continue
                if exc.status_code not in RETRYABLE_STATUS or attempt > self.settings.max_retries:
                    raise _refusal(exc.status_code, self._said(exc), self.settings, attempt) from None
                self._wait(self._delay(attempt, exc.response.headers.get("retry-after")), deadline, attempt)
                continue
            except (self._openai.APITimeoutError, self._openai.APIConnectionError) as exc:
                if attempt > self.settings.max_retries or isinstance(exc, self._openai.APITimeoutError):
                    if isinstance(exc, self._openai.APITimeoutError):
                        raise _too_slow(self.settings, attempt) from None
                    raise LLMError("the LLM cannot be reached", field="llm.base_url", value=self.settings.base_url,
                                   hint=f"nothing answered at {self.settings.endpoint} ({brief(str(exc.__cause__ or exc))}; {attempt} "
                                        "attempts): start the server there, or correct llm.base_url") from None
                self._wait(self._delay(attempt, None), deadline, attempt)
                continue
            except self._openai.APIError as exc:  # a body the client cannot read as a response
                raise LLMError("the LLM's answer is not a chat completion", field="llm.base_url", value=self.settings.base_url,
                               hint=brief(str(exc))) from None
            return _completion(raw, estimated, attempt, budget, server=self.settings.base_url)
        raise AssertionError("unreachable: the loop returns or raises")

    def _shape(self, reads: str) -> dict[str, Any]:
        """The keywords that shape the answer: its format (unless refused), and the read tool when reads are asked as tool
        calls (offered, or closed with tool_choice none: the conversation holds tool calls, so the tool stays defined)."""
        tools = reads and self.read_form == "tools"
        may_investigate = reads == "offered" and not tools
        shape = {} if self._format_refused else answer_format(self.settings.json_mode, self.settings.schema, may_investigate=may_investigate)
        if tools:
            shape.update(tools=[READ_TOOL], tool_choice="auto" if reads == "offered" else "none")
        return shape

    def _cap(self, budget: TokenBudget, estimated: int) -> dict[str, int]:
        """The answer's length cap, within what the budget leaves after the prompt: a server generates no longer than
        the planner reads (a small model asked for JSON alone can write until its context is full, long after the
        call ended, and the next request waits behind it)."""
        if not self._cap_names:
            return {}
        return {self._cap_names[0]: max(MIN_ANSWER_TOKENS, min(MAX_ANSWER_TOKENS, budget.limit - budget.spent - estimated))}

    def _before(self, deadline: float, attempt: int, call: Callable[[], Any]) -> Any:
        """The call's answer, or an LLMError once the deadline passed: it runs in a thread of its own, left behind to
        end by itself."""
        outcome: list[Any] = []

        def ask() -> None:
            try:
                outcome.append((True, call()))
            except BaseException as exc:  # noqa: BLE001 - handed to the caller as it is
                outcome.append((False, exc))

        worker = threading.Thread(target=ask, name="sentinel-heal-llm", daemon=True)
        worker.start()
        worker.join(max(deadline - time.monotonic(), 0.0))
        if not outcome:
            raise _too_slow(self.settings, attempt)
        answered, value = outcome[0]
        if not answered:
            raise value
        return value

    def _wait(self, seconds: float, deadline: float, attempt: int) -> None:
        """Wait before the next attempt, unless that would pass the deadline: then the call ends now."""
        if time.monotonic() + seconds >= deadline:
            raise _too_slow(self.settings, attempt, f", the next not before {seconds:.0f}s")
        self._sleep(seconds)

    def _said(self, exc: Any) -> str:
        """What the server said of an HTTP error, short (its error's own message, without the client's "Error code: N -"),
        its key masked: a proxy may echo the key it refused."""
        body = exc.body
        said = brief(str(body["message"] if isinstance(body, dict) and isinstance(body.get("message"), str) else exc.message))
        return said.replace(self.settings.api_key, "********") if self.settings.api_key else said

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


def _refusal(status: int, said: str, settings: LLMSettings, attempts: int) -> LLMError:
    """An HTTP error the LLM's server answered, against the option that fixes it: a refused key names llm.api_key (never
    its value), a model the server does not have names llm.model, a rate limit llm.max_retries, anything else the
    server of llm.base_url."""
    where = settings.endpoint
    if status in (401, 403):
        key = "set, not shown" if settings.api_key else "not set"
        return LLMError(f"the LLM refused the API key (HTTP {status}: {said})", field="llm.api_key", value=key,
                        hint=f"set llm.api_key (the role's autoheal_llm.api_key, or OPENAI_API_KEY on the controller) to a key "
                             f"{where} takes for model {settings.model}")
    if status == 404 and "model" in said.lower():
        return LLMError(f"the LLM's server has no model {settings.model!r} (HTTP 404: {said})", field="llm.model", value=settings.model,
                        hint=f"name a model {where} serves (GET {where.rstrip('/')}/models lists them; Ollama: ollama pull MODEL)")
    if status == 404:
        return LLMError(f"nothing answers chat completions at {where} (HTTP 404: {said})", field="llm.base_url", value=settings.base_url,
                        hint="base_url is the API's root, where /chat/completions is below it: http://HOST:PORT/v1 for most servers")
    if status == 429:
        return LLMError(f"the LLM answered HTTP 429 (too many requests) {attempts} times: {said}", field="llm.max_retries",
                        value=settings.max_retries,
                        hint=f"{where} limits how often it is asked, or the key's quota is spent: raise the quota, ask less often, or "
                             "let retries wait longer (llm.max_retries)")
    if status >= 500:
        return LLMError(f"the LLM's server failed (HTTP {status}, {attempts} attempts: {said})", field="llm.base_url", value=settings.base_url,
                        hint=f"the server at {where} says why in its own log; it is that server's to fix, or point llm.base_url at another")
    return LLMError(f"the LLM answered HTTP {status}", field="llm.base_url", value=settings.base_url, hint=said)


def _too_slow(settings: LLMSettings, attempts: int, more: str = "") -> LLMError:
    return LLMError("the LLM did not answer in time", field="llm.timeout", value=settings.timeout,
                    hint=f"{settings.endpoint} gave no answer within {settings.timeout}s for the whole call ({attempts} attempts{more}): "
                         "raise llm.timeout, or ask a faster model or server")


def _completion(raw: Any, estimated: int, attempt: int, budget: TokenBudget, *, server: str | None) -> Completion:
    """The text of a chat completion (``raw``: the HTTP response), charged to the budget; a body that is not UTF-8 JSON,
    an answer that is no chat completion (a proxy's page, a JSON array, a null message) or one cut at its token limit is
    an LLMError."""
    try:
        response = raw.parse()
    except (UnicodeDecodeError, json.JSONDecodeError) as exc:  # the openai client lets Python's own words through
        raise _unreadable(exc, raw.status_code, server) from None
    try:
        choice = response.choices[0]
        text = _message_text(choice.message.content)
        finish_reason = getattr(choice, "finish_reason", None)
        usage = response.usage
        calls = tuple(ToolCall(id=str(call.id), name=str(call.function.name), arguments=str(call.function.arguments or ""))
                      for call in getattr(choice.message, "tool_calls", None) or ())
    except (AttributeError, IndexError, TypeError):
        raise LLMError("the LLM's answer is not a chat completion", field="answer", value=brief(str(response))) from None
    prompt_tokens = getattr(usage, "prompt_tokens", None) or estimated
    completion_tokens = getattr(usage, "completion_tokens", None) or 0
    budget.charge(prompt_tokens + completion_tokens)
    if finish_reason == "length":
        raise LLMError("the LLM's answer was cut at its token limit (finish_reason length)", field="answer", value=brief(str(text or "")))
    if calls:
        text = text or ""
    elif text is None:
        raise LLMError("the LLM's answer holds no message text", field="answer.choices[0].message", value=brief(str(choice)))
    return Completion(text=text, prompt_tokens=prompt_tokens, completion_tokens=completion_tokens, attempts=attempt, tool_calls=calls)


def _unreadable(exc: UnicodeDecodeError | json.JSONDecodeError, status: int, server: str | None) -> LLMError:
    """A body that is not UTF-8, or not JSON, said with where it stops being readable and a short escaped excerpt there."""
    body: bytes | str
    if isinstance(exc, UnicodeDecodeError):
        body, at = exc.object, exc.start
        what = f"not UTF-8 (byte 0x{body[at]:02x} at offset {at}: {exc.reason})"
    else:
        body, at = exc.doc, exc.pos
        what = f"not JSON ({exc.msg} at offset {at})"
    near = ascii(body[max(at - EXCERPT_SIDE, 0):at + EXCERPT_SIDE])
    return LLMError(f"the LLM answered HTTP {status} with a body that is {what}, near there: {near}", field="llm.base_url",
                    value=server, hint="base_url must reach a server that answers chat completions as UTF-8 JSON; check it and "
                                       "any proxy in between")


def _message_text(content: Any) -> str | None:
    """A message's text: its content, or, for a content sent as a list of parts (Mistral's reasoning models, some
    proxies), its text parts joined in order; thinking and reasoning parts are drafts, as a <think> preamble is, never
    the answer. None when it holds no text."""
    if isinstance(content, list):
        texts = [part["text"] for part in content
                 if isinstance(part, dict) and part.get("type") == "text" and isinstance(part.get("text"), str)]
        return "".join(texts) if texts else None
    return content if isinstance(content, str) else None


def brief(text: str) -> str:
    """Enough of a value for an error message."""
    return clip(text, 200)
