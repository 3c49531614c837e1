"""A real HTTP server that speaks the OpenAI chat-completions (and embeddings) API with scripted answers.

Tests start it on 127.0.0.1 and point the real ``openai`` client (through sentinel.heal's LLM
settings) at it. Each request to ``/v1/chat/completions`` takes the next scripted answer (or what ``respond`` makes of the
request, or the default one): a JSON plan, reads asked as tool calls or in the JSON form, malformed text, content
as a list of parts (a reasoning model's thinking, then its text), a body that is no chat completion or not even UTF-8,
an HTTP error such as 401, 429 or 500 (with the message a real server words), a slow answer. Every
request is recorded (body and headers) so tests can assert on exactly what was sent.
``/v1/embeddings`` answers a deterministic vector per input ([its length, its number of words]),
in reverse order as the API allows, or ``embeddings_status`` when that is not 200.

    with ScriptedLLM([Answer.plan([["service", "nginx", "start"]]), Answer.error(500)]) as llm:
        ... llm.base_url ...  # http://127.0.0.1:PORT/v1
        llm.requests          # what the client sent

Also runnable by hand: ``python tests/llm_server.py --port 8089 --answer '{"steps": []}'``.
"""

from __future__ import annotations

import argparse
import json
import re
import threading
import time
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Callable


@dataclass(frozen=True)
class Answer:
    status: int = 200
    # the message's content: text, or a list of parts as Mistral's reasoning models and some proxies send it
    content: str | list[dict[str, Any]] = ""
    delay: float = 0.0
    headers: dict[str, str] = field(default_factory=dict)
    prompt_tokens: int | None = None
    finish_reason: str = "stop"
    # a 200 body that is no chat completion (a proxy's login page, a JSON array, bytes that are not UTF-8): sent as it is,
    # with this content type
    raw: str | bytes | None = None
    content_type: str = "application/json"
    # seconds between the bytes of the body: a server that trickles its answer passes every per-read timeout
    trickle: float = 0.0
    # OpenAI tool calls of the answer: (id, name, arguments as JSON text)
    tool_calls: tuple[tuple[str, str, str], ...] = ()
    # an HTTP error's message, as the server words it (OpenAI: "The model `x` does not exist"); "scripted STATUS" unless set
    message: str = ""

    @classmethod
    def text(cls, content: str, **kwargs: Any) -> Answer:
        return cls(content=content, **kwargs)

    @classmethod
    def plan(cls, steps: list[list[str]], *, diagnosis: str = "scripted diagnosis", rationale: str = "scripted",
             expected_signal: str = "the service answers", **kwargs: Any) -> Answer:
        body = {"diagnosis": diagnosis, "steps": [{"argv": argv} for argv in steps], "rationale": rationale,
                "expected_signal": expected_signal, "escalate": None}
        return cls(content=json.dumps(body), **kwargs)

    @classmethod
    def parts(cls, *parts: dict[str, Any], **kwargs: Any) -> Answer:
        """The content as a list of parts, as Mistral's reasoning models answer: ``{"type": "thinking", "thinking":
        [{"type": "text", "text": ...}]}``, then ``{"type": "text", "text": ...}``."""
        return cls(content=list(parts), **kwargs)

    @classmethod
    def reads(cls, *reads: tuple[list[str], str], **kwargs: Any) -> Answer:
        """Reads asked for as tool calls of the ``read`` tool: (argv, why) each."""
        calls = tuple((f"call_{index}", "read", json.dumps({"argv": argv, "why": why})) for index, (argv, why) in enumerate(reads))
        return cls(content="", tool_calls=calls, finish_reason="tool_calls", **kwargs)

    @classmethod
    def investigate(cls, *reads: tuple[list[str], str], **kwargs: Any) -> Answer:
        """Reads asked for in the JSON form: (argv, why) each."""
        return cls(content=json.dumps({"investigate": [{"argv": argv, "why": why} for argv, why in reads]}), **kwargs)

    @classmethod
    def body(cls, raw: str | bytes, content_type: str = "application/json", **kwargs: Any) -> Answer:
        return cls(raw=raw, content_type=content_type, **kwargs)

    @classmethod
    def error(cls, status: int, **kwargs: Any) -> Answer:
        return cls(status=status, **kwargs)


@dataclass
class Recorded:
    path: str
    headers: dict[str, str]
    body: dict[str, Any]
    query: str = ""

    @property
    def prompt(self) -> str:
        """Every message's content, joined: what the model was shown."""
        return "\n".join(str(message.get("content", "")) for message in self.body.get("messages", []))

    @property
    def messages(self) -> list[dict[str, Any]]:
        return list(self.body.get("messages", []))


class ScriptedLLM:
    def __init__(self, answers: list[Answer] | None = None, *, default: Answer | None = None,
                 respond: Callable[[Recorded], Answer] | None = None) -> None:
        self.answers = list(answers or [])
        self.default = default or Answer.error(503)
        # a model that answers what it is shown: used once the scripted answers are spent, before the default
        self.respond = respond
        # as a server without tool calling answers a request that offers tools: this status (None: taken)
        self.refuses_tools: int | None = None
        self.requests: list[Recorded] = []
        self.embeddings_status = 200
        # as llama.cpp's server answers a response_format it does not take: this status, no answer consumed (None: taken)
        self.refuses_response_format: int | None = None
        # as OpenAI's reasoning models answer max_tokens: HTTP 400 naming each of these parameters when a request carries it
        self.refuses_parameters: tuple[str, ...] = ()
        self._lock = threading.Lock()
        self._server = ThreadingHTTPServer(("127.0.0.1", 0), self._handler())
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, kwargs={"poll_interval": 0.05}, name="scripted-llm", daemon=True)

    @property
    def base_url(self) -> str:
        host, port = self._server.server_address[:2]
        return f"http://{host}:{port}/v1"

    @property
    def chat_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/chat/completions")]

    @property
    def embedding_requests(self) -> list[Recorded]:
        return [r for r in self.requests if r.path.endswith("/embeddings")]

    def script(self, *answers: Answer) -> None:
        with self._lock:
            self.answers.extend(answers)

    def __enter__(self) -> ScriptedLLM:
        self._thread.start()
        return self

    def __exit__(self, *exc_info: object) -> None:
        self._server.shutdown()
        self._server.server_close()

    def _next_answer(self, recorded: Recorded) -> Answer:
        with self._lock:
            self.requests.append(recorded)
            if self.answers:
                return self.answers.pop(0)
        return self.respond(recorded) if self.respond is not None else self.default

    def _handler(self) -> type[BaseHTTPRequestHandler]:
        llm = self

        class Handler(BaseHTTPRequestHandler):
            def log_message(self, format: str, *args: Any) -> None:
                return

            def do_GET(self) -> None:
                if self.path.rstrip("/").endswith("/models"):
                    self._json(200, {"object": "list", "data": [{"id": "scripted", "object": "model", "owned_by": "tests"}]})
                else:
                    self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})

            def do_POST(self) -> None:
                length = int(self.headers.get("Content-Length") or 0)
                raw = self.rfile.read(length)
                try:
                    body = json.loads(raw or b"{}")
                except json.JSONDecodeError:
                    body = {"unparsable": raw.decode("utf-8", "replace")}
                path, _mark, query = self.path.partition("?")
                recorded = Recorded(path=path, headers={k.lower(): v for k, v in self.headers.items()}, body=body, query=query)
                if path.rstrip("/").endswith("/embeddings"):
                    with llm._lock:
                        llm.requests.append(recorded)
                    self._embeddings(body)
                    return
                if not path.rstrip("/").endswith("/chat/completions"):
                    llm._next_answer(recorded)
                    self._json(404, {"error": {"message": f"no route {self.path}", "type": "not_found"}})
                    return
                refused = next((name for name in llm.refuses_parameters if name in body), None)
                if refused is not None:
                    with llm._lock:
                        llm.requests.append(recorded)
                    self._json(400, {"error": {"message": f"Unsupported parameter: '{refused}' is not supported with this model.",
                                               "type": "invalid_request_error", "param": refused}})
                    return
                if llm.refuses_response_format and "response_format" in body:
                    with llm._lock:
                        llm.requests.append(recorded)
                    self._json(llm.refuses_response_format, {"error": {
                        "message": "Input should be 'text' or 'json_object' (response_format)", "type": "invalid_request_error"}})
                    return
                if llm.refuses_tools and "tools" in body:
                    with llm._lock:
                        llm.requests.append(recorded)
                    self._json(llm.refuses_tools, {"error": {"message": "tools param requires --jinja flag", "type": "invalid_request_error"}})
                    return
                answer = llm._next_answer(recorded)
                if answer.delay:
                    time.sleep(answer.delay)
                if answer.status != 200:
                    error = {"message": answer.message or f"scripted {answer.status}", "type": "scripted_error", "code": answer.status}
                    self._json(answer.status, {"error": error}, answer.headers)
                    return
                if answer.raw is not None:
                    data = answer.raw if isinstance(answer.raw, bytes) else answer.raw.encode()
                    self._send(200, data, answer.content_type, answer.headers)
                    return
                prompt_tokens = answer.prompt_tokens if answer.prompt_tokens is not None else len(recorded.prompt) // 4
                completion_tokens = len(answer.content if isinstance(answer.content, str) else json.dumps(answer.content)) // 4 + 1
                message: dict[str, Any] = {"role": "assistant", "content": answer.content}
                if answer.tool_calls:
                    message = {"role": "assistant", "content": answer.content or None, "tool_calls": [
                        {"id": call_id, "type": "function", "function": {"name": name, "arguments": arguments}}
                        for call_id, name, arguments in answer.tool_calls]}
                self._json(200, {
                    "id": f"chatcmpl-{len(llm.requests)}",
                    "object": "chat.completion",
                    "created": int(time.time()),
                    "model": body.get("model", "scripted"),
                    "choices": [{"index": 0, "finish_reason": answer.finish_reason, "message": message}],
                    "usage": {"prompt_tokens": prompt_tokens, "completion_tokens": completion_tokens,
                              "total_tokens": prompt_tokens + completion_tokens},
                }, answer.headers, trickle=answer.trickle)

            def _embeddings(self, body: dict[str, Any]) -> None:
                if llm.embeddings_status != 200:
                    self._json(llm.embeddings_status, {"error": {"message": "the model is not loaded", "type": "server_error"}})
                    return
                inputs = body["input"] if isinstance(body["input"], list) else [body["input"]]
                data = [{"object": "embedding", "index": i, "embedding": [float(len(text)), float(len(text.split()))]}
                        for i, text in enumerate(inputs)]
                self._json(200, {"object": "list", "data": data[::-1], "model": body.get("model"), "usage": {"prompt_tokens": 1, "total_tokens": 1}})

            def _json(self, status: int, payload: dict[str, Any], headers: dict[str, str] | None = None, trickle: float = 0.0) -> None:
                self._send(status, json.dumps(payload).encode(), "application/json", headers, trickle)

            def _send(self, status: int, data: bytes, content_type: str, headers: dict[str, str] | None = None,
                      trickle: float = 0.0) -> None:
                try:
                    self.send_response(status)
                    self.send_header("Content-Type", content_type)
                    self.send_header("Content-Length", str(len(data)))
                    for name, value in (headers or {}).items():
                        self.send_header(name, value)
                    self.end_headers()
                    if not trickle:
                        self.wfile.write(data)
                    for byte in data if trickle else b"":
                        self.wfile.write(bytes([byte]))
                        self.wfile.flush()
                        time.sleep(trickle)
                except (BrokenPipeError, ConnectionResetError):
                    pass  # the client gave up (a timeout test): nothing to answer to

        return Handler


# what a model knows of Debian's packages: the owner, group and mode they give their directories
DEBIAN_DIRECTORIES = {"/var/lib/nginx": ("root", "root", "0755"), "/var/log/postgresql": ("root", "postgres", "1775"),
                      "/var/lib/redis": ("redis", "redis", "0750")}


def tool_results(recorded: Recorded) -> str:
    """What the reads of the conversation showed, as its tool results."""
    return "\n".join(str(m.get("content")) for m in recorded.messages if m.get("role") == "tool")


def reads_then_plans(recorded: Recorded) -> Answer:
    """An SRE's model: it reads the unit, then the directory the unit's check names, and plans from what it read: a
    working directory that is missing is made; a directory the service cannot write is given back to its account."""
    prompt = recorded.prompt
    unit = re.search(r"unit (\S+)\.service", prompt)
    if "look first" not in recorded.messages[0]["content"] or unit is None:
        return Answer.text(json.dumps({"steps": [], "escalate": "the unit's definition was not read, so the cause is not known"}))
    name = unit.group(1)
    shown = tool_results(recorded)
    workdir = re.search(r"^WorkingDirectory=(/\S+)", shown, re.MULTILINE)
    checked = re.search(r"test -w (/\S+)", shown)
    restart = [["systemctl", "reset-failed", name], ["systemctl", "start", name]]
    if workdir:
        owner, group, mode = DEBIAN_DIRECTORIES.get(workdir.group(1), ("root", "root", "0755"))
        return Answer.plan([["install", "-d", "-m", mode, "-o", owner, "-g", group, workdir.group(1)], *restart],
                           diagnosis=f"WorkingDirectory={workdir.group(1)} is missing")
    owned = re.search(r"^d\S+\s+\d+\s+(\S+)\s+(\S+)", shown, re.MULTILINE)
    account = re.search(r"runs as (\S+)", prompt)
    if checked and owned and account and owned.group(1) != account.group(1):
        user = account.group(1)
        return Answer.plan([["chown", "-h", f"{user}:{user}", checked.group(1)], *restart],
                           diagnosis=f"{checked.group(1)} is owned by {owned.group(1)}; {user} cannot write it")
    if checked:
        return Answer.reads((["ls", "-ld", checked.group(1)], "who owns the directory the unit's check must write"))
    return Answer.reads((["systemctl", "cat", name], "the unit's definition and drop-ins"))


def main() -> None:
    parser = argparse.ArgumentParser(description="Serve scripted OpenAI chat-completions answers on 127.0.0.1.")
    parser.add_argument("--port", type=int, default=8089)
    parser.add_argument("--answer", action="append", default=[], help="content of the next answer (repeatable)")
    options = parser.parse_args()
    llm = ScriptedLLM([Answer.text(content) for content in options.answer])
    llm._server.server_close()
    llm._server = ThreadingHTTPServer(("127.0.0.1", options.port), llm._handler())
    print(f"scripted LLM on {llm.base_url}", flush=True)
    llm._server.serve_forever()


if __name__ == "__main__":
    main()
