"""The executor's decision_log.py: one bounded, escaped entry per request, and past its rate a count said once."""

from __future__ import annotations

import json
from pathlib import Path

from host_executor import (
    execute,
    request,
)

from ansible_collections.sentinel.heal.plugins.module_utils._host.executor import REFUSED


def test_a_request_that_would_flood_the_decision_log_leaves_one_bounded_escaped_entry(host: Path) -> None:
    """A request under the size limit whose fields echo back large (escapes, a long reason) is one entry of at most
    4 KiB with what was cut counted, and no control character reaches the log unescaped."""
    hostile = "\x1b[31m\u202e" + "é\x00" * 4000
    rc, response, log = execute(host, request(["cat", hostile], ["df", "-h", "/"] * 200))
    assert rc == REFUSED, response
    raw = (host.parent / "log" / "exec.log").read_text()
    [line] = raw.splitlines()
    assert len(line.encode()) <= 4096 + 30 and "\x1b" not in raw and "\x00" not in raw and "\u202e" not in raw
    assert log[0]["truncated"] and log[0]["decision"] == "refused"


def test_past_its_rate_a_callers_entries_are_counted_and_said_once(tmp_path: Path) -> None:
    from ansible_collections.sentinel.heal.plugins.module_utils._host.decision_log import LOG_RATE, LOG_RATE_WINDOW_S, record_decision
    log_file, rates = tmp_path / "exec.log", tmp_path / "decisions"
    refused = dict(refused=True, rule="request", reason="the request is not JSON")
    for _request in range(LOG_RATE + 25):
        record_decision("mallory", {}, refused, str(log_file), str(rates), now=1000.0)
    assert len(log_file.read_text().splitlines()) == LOG_RATE
    record_decision("sentinel", {}, refused, str(log_file), str(rates), now=1001.0)  # another caller is not held back
    record_decision("mallory", {}, refused, str(log_file), str(rates), now=1000.0 + LOG_RATE_WINDOW_S)
    entries = [json.loads(line.split(" ", 1)[1]) for line in log_file.read_text().splitlines()]
    assert len(entries) == LOG_RATE + 3
    assert entries[-2] == {"caller": "mallory", "decision": "suppressed", "suppressed": 25,
                           "reason": f"25 requests suppressed (over {LOG_RATE} a minute)"}
    assert entries[-1]["caller"] == "mallory" and entries[-1]["decision"] == "refused"


def test_an_entry_of_nothing_but_control_characters_is_cut_to_its_bound_too() -> None:
    """Every field at its cut length and each character six once escaped: the entry is cut further until it fits."""
    from ansible_collections.sentinel.heal.plugins.module_utils._host.decision_log import MAX_LOG_ENTRY_BYTES, bounded_log_line
    fields = ("reason", "host", "service", "caller", "rule", "policy_version")
    line = bounded_log_line(dict({field: chr(number) * 512 for number, field in enumerate(fields, start=1)}, step=["\x00" * 500] * 16))
    assert len(line.encode()) <= MAX_LOG_ENTRY_BYTES
    assert set(json.loads(line)["truncated"]) == {"step", *fields}
