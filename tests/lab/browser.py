"""Debian's Chromium, headless, driven as a person drives a page: over the DevTools protocol (a websocket), it opens a
URL, types into a field with keyboard input and clicks a button with the mouse at the button's place on the page, then
reads the page that follows. No script of the test runs in the page: the page's own Content-Security-Policy holds."""

from __future__ import annotations

import html
import itertools
import json
import re
import shutil
import subprocess
import tempfile
import time
import urllib.request
from types import TracebackType
from typing import Any

from websockets.sync.client import ClientConnection, connect

READY_S = 30.0
_LISTENING = re.compile(r"DevTools listening on (ws://\S+)")


class BrowserError(Exception):
    pass


class Chromium:
    """One headless Chromium with a profile of its own; ``with Chromium() as browser: browser.open(url)``."""

    def __init__(self) -> None:
        self._profile = tempfile.TemporaryDirectory(prefix="sentinel-heal-chromium.")
        self._process: subprocess.Popen[str] | None = None
        self._page: ClientConnection | None = None
        self._ids = itertools.count(1)
        self._pending: list[dict[str, Any]] = []  # events read while waiting for an answer

    def __enter__(self) -> Chromium:
        executable = shutil.which("chromium")
        if executable is None:
            raise BrowserError("Debian's chromium is missing: apt-get install -y chromium (make system-packages installs it)")
        self._process = subprocess.Popen(
            [executable, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions", "--remote-debugging-port=0",
             f"--user-data-dir={self._profile.name}", "about:blank"],
            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
        assert self._process.stderr is not None
        deadline = time.monotonic() + READY_S
        while time.monotonic() < deadline:
            line = self._process.stderr.readline()
            if found := _LISTENING.search(line):
                port = found.group(1).split(":")[2].split("/")[0]
                break
            if not line and self._process.poll() is not None:
                raise BrowserError(f"chromium exited ({self._process.returncode}) before it listened for DevTools")
        else:
            raise BrowserError(f"chromium did not listen for DevTools within {READY_S:g} s")
        with urllib.request.urlopen(f"http://127.0.0.1:{port}/json/list", timeout=10) as answer:
            [page] = [target for target in json.load(answer) if target["type"] == "page"]
        self._page = connect(page["webSocketDebuggerUrl"], max_size=None)
        self._send("Page.enable")
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        if self._page is not None:
            self._page.close()
        if self._process is not None:
            self._process.kill()
            self._process.wait(timeout=30)
        self._profile.cleanup()

    def open(self, url: str) -> str:
        """Load ``url``; the text the page shows."""
        self._until_loaded(lambda: self._send("Page.navigate", url=url))
        return self.text()

    def type_into(self, element_id: str, text: str) -> None:
        """Focus the element (as a click on it would) and type ``text``, key by key as the keyboard sends it."""
        node = self._node(f"#{element_id}")
        self._send("DOM.focus", nodeId=node)
        self._send("Input.insertText", text=text)

    def click(self, selector: str) -> str:
        """Press and release the mouse on the middle of the element, and wait for the page it leads to; its text."""
        quad = self._send("DOM.getBoxModel", nodeId=self._node(selector))["model"]["content"]
        x, y = sum(quad[0::2]) / 4, sum(quad[1::2]) / 4

        def press() -> None:
            for kind in ("mousePressed", "mouseReleased"):
                self._send("Input.dispatchMouseEvent", type=kind, x=x, y=y, button="left", clickCount=1)

        self._until_loaded(press)
        return self.text()

    def text(self) -> str:
        document = self._send("DOM.getDocument", depth=-1)["root"]["nodeId"]
        markup = self._send("DOM.getOuterHTML", nodeId=document)["outerHTML"]
        return html.unescape(re.sub(r"\s+", " ", re.sub(r"<style>.*?</style>|<[^>]+>", " ", markup, flags=re.S)).strip())

    def _node(self, selector: str) -> int:
        document = self._send("DOM.getDocument", depth=-1)["root"]["nodeId"]
        node = int(self._send("DOM.querySelector", nodeId=document, selector=selector)["nodeId"])
        if not node:
            raise BrowserError(f"the page has no element {selector}: {self.text()[:500]}")
        return node

    def _until_loaded(self, action: Any, timeout: float = 30.0) -> None:
        self._pending.clear()  # a load of the page before is not the one this action leads to
        action()
        self._wait_for_event("Page.loadEventFired", timeout)

    def _send(self, method: str, **params: Any) -> dict[str, Any]:
        assert self._page is not None
        call = next(self._ids)
        self._page.send(json.dumps({"id": call, "method": method, "params": params}))
        while True:
            message = json.loads(self._page.recv(timeout=30))
            if message.get("id") == call:
                if "error" in message:
                    raise BrowserError(f"{method}: {message['error']}")
                return dict(message.get("result") or {})
            self._pending.append(message)

    def _wait_for_event(self, name: str, timeout: float) -> None:
        assert self._page is not None
        deadline = time.monotonic() + timeout
        while True:
            for index, message in enumerate(self._pending):
                if message.get("method") == name:
                    del self._pending[: index + 1]
                    return
            self._pending.clear()
            left = deadline - time.monotonic()
            if left <= 0:
                raise BrowserError(f"no {name} within {timeout:g} s")
            self._pending.append(json.loads(self._page.recv(timeout=left)))
