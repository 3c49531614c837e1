"""A real HTTP server on 127.0.0.1 that records what each destination is sent (notify_cases.Recorder)."""

from __future__ import annotations

import json
import threading
import time
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any, Iterator

import pytest
from notify_cases import Recorder


@pytest.fixture
def recorder() -> Iterator[Recorder]:
    recorder = Recorder()

    class Handler(BaseHTTPRequestHandler):
        def do_POST(self) -> None:
            body = json.loads(self.rfile.read(int(self.headers["Content-Length"])))
            recorder.received.append((self.path, body))
            if recorder.sleep_s:
                time.sleep(recorder.sleep_s)
            status = recorder.status.get(self.path, 200)
            try:
                self.send_response(status)
                self.end_headers()
                self.wfile.write(b"ok")
            except OSError:  # the client gave up waiting
                pass

        def log_message(self, format: str, *args: Any) -> None:
            return

    server = ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    server.daemon_threads = True
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    recorder.url = f"http://127.0.0.1:{server.server_address[1]}"
    yield recorder
    server.shutdown()
    server.server_close()
