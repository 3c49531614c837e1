"""Sending to a real HTTP server on 127.0.0.1: every destination's payload arrives, a failing one is retried a bounded
number of times and recorded, a hanging one costs its timeout once per job, and no secret reaches any of them."""

from __future__ import annotations

import json
import time
from pathlib import Path

from notify_cases import Recorder, outcome

from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.destinations import destinations_from
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.messages import notices_of
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.sending import Notifier, RunLedger

# what test_redact.py shows redaction masks by its shape, and a literal secret of the play's
SHAPED_SECRET = "DB_PASSWORD: 'hunter2'"
PLAY_SECRET = "vaulted-s3cr3t-value"


def _all(recorder: Recorder, **extra: object) -> list[dict[str, object]]:
    return [{"type": kind, "url": f"{recorder.url}/{kind}", **extra} for kind in ("slack", "mattermost", "teams", "webhook")] + [
        {"type": "pagerduty", "url": f"{recorder.url}/pagerduty", "routing_key": "R0UTINGKEY0123456789", **extra}]


def _notifier(tmp_path: Path, entries: list[dict[str, object]], job: str = "awx-job-1", secrets: tuple[str, ...] = (),
              sleeps: list[float] | None = None) -> Notifier:
    return Notifier(destinations_from(entries), RunLedger(tmp_path, job), secrets,
                    sleep=(sleeps.append if sleeps is not None else lambda seconds: None))


def test_each_destination_receives_its_payload(tmp_path: Path, recorder: Recorder) -> None:
    deliveries = _notifier(tmp_path, _all(recorder)).send(notices_of([outcome("escalated")], approval_ttl=60, now=1.0))
    assert [delivery.delivered for delivery in deliveries] == [True] * 5
    [slack], [teams], [pagerduty] = recorder.bodies("/slack"), recorder.bodies("/teams"), recorder.bodies("/pagerduty")
    assert slack["blocks"] and teams["attachments"][0]["content"]["type"] == "AdaptiveCard"
    assert pagerduty["event_action"] == "trigger" and pagerduty["payload"]["source"] == "web1"
    assert recorder.bodies("/mattermost")[0]["attachments"] and recorder.bodies("/webhook")[0]["event"] == "escalated"


def test_a_first_try_heal_sends_nothing_unless_asked(tmp_path: Path, recorder: Recorder) -> None:
    entries = [{"type": "webhook", "url": f"{recorder.url}/quiet"}, {"type": "webhook", "url": f"{recorder.url}/all", "events": ["healed"]}]
    _notifier(tmp_path, entries).send(notices_of([outcome("healed")], approval_ttl=60, now=1.0))
    assert recorder.bodies("/quiet") == [] and [body["event"] for body in recorder.bodies("/all")] == ["healed"]


def test_a_destination_that_fails_is_retried_then_recorded(tmp_path: Path, recorder: Recorder) -> None:
    recorder.status["/down"] = 500
    sleeps: list[float] = []
    [delivery] = _notifier(tmp_path, [{"type": "webhook", "url": f"{recorder.url}/down", "retries": 2}], sleeps=sleeps).send(
        notices_of([outcome("escalated")], approval_ttl=60, now=1.0))
    assert len(recorder.bodies("/down")) == 3 and delivery.tries == 3 and not delivery.delivered
    assert delivery.error == "HTTP 500 Internal Server Error" and len(sleeps) == 2 and sum(sleeps) < 1
    assert "webhook" in delivery.describe() and recorder.url not in delivery.describe()


def test_a_refusal_is_not_retried(tmp_path: Path, recorder: Recorder) -> None:
    recorder.status["/gone"] = 404
    notices = notices_of([outcome("escalated")], approval_ttl=60, now=1.0)
    [delivery] = _notifier(tmp_path, [{"type": "slack", "url": f"{recorder.url}/gone"}]).send(notices)
    assert delivery.tries == 1 and "refused" in delivery.error


def test_a_destination_that_hangs_costs_its_timeout_once_per_job(tmp_path: Path, recorder: Recorder) -> None:
    recorder.sleep_s = 2.0
    entries = [{"type": "webhook", "url": f"{recorder.url}/slow", "timeout": 0.3, "retries": 2}]
    notices = notices_of([outcome("escalated", host=f"web{n}") for n in range(5)], approval_ttl=60, now=1.0)
    started = time.monotonic()
    first = _notifier(tmp_path, entries).send(notices[:3])
    # another host of the same job (another process) reads the same ledger
    second = _notifier(tmp_path, entries).send(notices[3:])
    took = time.monotonic() - started
    assert took < 0.3 * 3, took
    assert len(recorder.bodies("/slow")) == 1
    assert "no answer within 0.3 s" in first[0].error and all(delivery.skipped for delivery in [*first[1:], *second])
    assert "skipped for the rest of this job" in second[0].error
    # the next job asks it again
    recorder.sleep_s = 0
    [again] = _notifier(tmp_path, entries, job="awx-job-2").send(notices[:1])
    assert again.delivered


def test_a_secret_in_the_evidence_reaches_no_destination(tmp_path: Path, recorder: Recorder) -> None:
    summary = f"nginx: [emerg] upstream said {SHAPED_SECRET} and {PLAY_SECRET}"
    evidence = {"unit": {"Id": "nginx.service", "cause": f"auth failed for {PLAY_SECRET}"},
                "changes": {"files": [{"path": "/etc/nginx/nginx.conf", "change": "modified", "diff": f"-x\n+password {PLAY_SECRET}\n"}],
                            "packages": []}}
    outcomes = [outcome(status, summary=summary, evidence=evidence, reason=f"nginx escalated: {PLAY_SECRET}")
                for status in ("escalated", "awaiting_approval")]
    _notifier(tmp_path, _all(recorder), secrets=(PLAY_SECRET,)).send(notices_of(outcomes, approval_ttl=60, now=1.0))
    sent = json.dumps([body for _path, body in recorder.received])
    assert len(recorder.received) == 10
    assert PLAY_SECRET not in sent and "hunter2" not in sent
