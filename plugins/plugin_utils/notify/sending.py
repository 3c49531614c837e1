"""Sending notices without getting in the heal's way: urllib (through ansible-core's open_url, no new dependency), each
destination with its timeout and a bounded number of tries with a short backoff; what fails is a :class:`Delivery` the
task returns (a warning on the incident, a record of the audit trail), never an error of the heal.

A job is many processes (Ansible forks one per host and task), so what they share is a :class:`RunLedger` of files in
the state dir: a destination that timed out is skipped by every later host of the job (it costs its timeout once per
job, not per incident). That is what a job of one machine finds and keeps; what must hold across jobs, controllers and
execution nodes - a fleet incident's message said once - is in the memory they share (notify/said.py)."""

from __future__ import annotations

import hashlib
import json
import re
import shutil
import socket
import time
import urllib.error
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Callable, Sequence

from ansible.module_utils.urls import open_url

from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.secrets import redact
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.destinations import Destination
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.formats import payload
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.messages import Notice, redacted

NOTIFY_DIR = "notify"
# waits between tries: short, a person's phone is not worth holding a heal for
BACKOFF_S = (0.25, 0.5, 1.0, 2.0, 2.0)
# a job's ledger is kept this long (a play of many batches; AWX retries the same job id)
RUN_LEDGER_KEPT_S = 86400
USER_AGENT = "sentinel.heal-notify/1"
_SAFE = re.compile(r"[^A-Za-z0-9_.-]")


@dataclass(frozen=True)
class Delivery:
    """What became of one notice at one destination (named, never by its URL)."""

    destination: str
    type: str
    event: str
    key: str
    incident_id: str
    delivered: bool
    tries: int
    error: str = ""
    skipped: bool = False

    def to_dict(self) -> dict[str, Any]:
        return {"destination": self.destination, "type": self.type, "event": self.event, "key": self.key, "incident_id": self.incident_id,
                "delivered": self.delivered, "tries": self.tries, "error": self.error, "skipped": self.skipped}

    def describe(self) -> str:
        how = "not sent" if self.skipped else f"not delivered after {self.tries} tr{'y' if self.tries == 1 else 'ies'}"
        return f"notification {self.event} to {self.destination} {how}: {self.error}"


class RunLedger:
    """The destinations the hosts of one job found down, as files in ``<state_dir>/notify/runs/<job>/``: one job's
    processes on one machine (its forks, and the batches of its play), the place a destination's timeout is spent once;
    the next job asks the destination again."""

    def __init__(self, state_dir: str | Path, job: str, *, now: float | None = None) -> None:
        self.run_dir = Path(state_dir).expanduser() / NOTIFY_DIR / "runs" / (_SAFE.sub("_", job) or "run")
        self.run_dir.mkdir(parents=True, exist_ok=True)
        _prune(self.run_dir.parent, (now or time.time()) - RUN_LEDGER_KEPT_S, keep=self.run_dir)

    def down_because(self, destination: Destination) -> str | None:
        try:
            return (self.run_dir / _id_of(destination)).read_text(encoding="utf-8")
        except OSError:
            return None

    def mark_down(self, destination: Destination, why: str) -> None:
        (self.run_dir / _id_of(destination)).write_text(why, encoding="utf-8")


def _prune(runs: Path, older_than: float, keep: Path) -> None:
    for run in runs.iterdir():
        try:
            if run != keep and run.stat().st_mtime < older_than:
                shutil.rmtree(run, ignore_errors=True)
        except OSError:
            continue


def _id_of(destination: Destination) -> str:
    """A destination's name in the ledger: a hash of where it posts, which says nothing of the URL or key."""
    return hashlib.sha256("\x1f".join((destination.type, destination.url, destination.routing_key)).encode()).hexdigest()[:24]


Post = Callable[[str, bytes, float], int]


def http_post(url: str, body: bytes, timeout: float) -> int:
    """POST JSON with ansible-core's urllib (its certificate checks; no new dependency); the HTTP status (an error status
    raises urllib's HTTPError). A redirect is not followed: a message goes only where it was configured to."""
    with open_url(url, data=body, method="POST", headers={"Content-Type": "application/json"}, http_agent=USER_AGENT, timeout=timeout,
                  follow_redirects="safe") as response:
        response.read(65536)
        return int(response.status)


def tell(destinations: Sequence[Destination], notices: Sequence[Notice], *, state_dir: str | Path, job: str,
         secrets: Sequence[str]) -> list[Delivery]:
    """The notices sent to the destinations that want them, with the ledger of the job (exec/adapter.py job_of);
    nothing when there is nothing to say or nowhere to say it. A ledger that cannot be written is one delivery not
    made: notifying never fails a task."""
    if not destinations or not notices:
        return []
    try:
        ledger = RunLedger(state_dir, job)
    except OSError as exc:
        return [Delivery("every destination", "-", "every notice", "", "", delivered=False, tries=0, skipped=True,
                         error=f"the ledger in {state_dir} cannot be written ({exc.strerror or exc})")]
    return Notifier(destinations, ledger, secrets).send(notices)


class Notifier:
    """Sends notices to the destinations that want them, redacted first."""

    def __init__(self, destinations: Sequence[Destination], ledger: RunLedger, secrets: Sequence[str], *, post: Post = http_post,
                 sleep: Callable[[float], None] = time.sleep) -> None:
        self.destinations, self.ledger, self.secrets = tuple(destinations), ledger, tuple(secrets)
        self.post, self.sleep = post, sleep

    def send(self, notices: Sequence[Notice]) -> list[Delivery]:
        deliveries = []
        for notice in notices:
            clean = redacted(notice, self.secrets)
            for destination in self.destinations:
                if destination.wants(notice.event):
                    deliveries.append(self._deliver(clean, destination))
        return deliveries

    def _deliver(self, notice: Notice, destination: Destination) -> Delivery:
        down = self.ledger.down_because(destination)
        if down is not None:
            return Delivery(destination.name, destination.type, notice.event, notice.key, notice.incident_id, delivered=False, tries=0, skipped=True,
                            error=f"skipped for the rest of this job: {down}")
        body = json.dumps(payload(notice, destination), ensure_ascii=False).encode()
        error = ""
        for number in range(1, destination.retries + 2):
            try:
                self.post(destination.url, body, destination.timeout)
                return Delivery(destination.name, destination.type, notice.event, notice.key, notice.incident_id, delivered=True, tries=number)
            except urllib.error.HTTPError as exc:
                error = f"HTTP {exc.code} {exc.reason}"
                if 400 <= exc.code < 500 and exc.code not in (408, 429):
                    # refused: the same message will be refused again
                    return self._failed(notice, destination, number, f"{error} (refused)")
            except TimeoutError as exc:
                return self._timed_out(notice, destination, number, exc)
            except (urllib.error.URLError, OSError, ValueError) as exc:
                reason = getattr(exc, "reason", exc)
                if isinstance(reason, (TimeoutError, socket.timeout)):
                    return self._timed_out(notice, destination, number, reason)
                error = str(reason)
            if number <= destination.retries:
                self.sleep(BACKOFF_S[min(number - 1, len(BACKOFF_S) - 1)])
        return self._failed(notice, destination, destination.retries + 1, error)

    def _timed_out(self, notice: Notice, destination: Destination, tries: int, exc: BaseException) -> Delivery:
        """A destination that does not answer in its timeout is not asked again in this job, by any host."""
        why = f"no answer within {destination.timeout:g} s ({self._clean(str(exc)) or 'timed out'})"
        self.ledger.mark_down(destination, why)
        return Delivery(destination.name, destination.type, notice.event, notice.key, notice.incident_id, delivered=False, tries=tries, error=why)

    def _failed(self, notice: Notice, destination: Destination, tries: int, error: str) -> Delivery:
        return Delivery(destination.name, destination.type, notice.event, notice.key, notice.incident_id, delivered=False, tries=tries,
                        error=self._clean(error))

    def _clean(self, text: str) -> str:
        """An error as it may be said: without the destination's URLs and keys, nor the run's secrets."""
        secrets = [value for destination in self.destinations for value in (destination.url, destination.routing_key) if value]
        return str(redact(text, [*secrets, *self.secrets]))
