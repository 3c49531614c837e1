"""The history report over 1,000 episodes: how long it takes to render and how big the page is, and the audit export of
the same window.

Fills a memory in a temporary directory through Memory.record_attempt with a week of realistic episodes (5 services on 20
hosts: most healed at once, some healed on a second attempt after a failed one, some escalated with a configuration
error, some waiting for approval; kilobytes of evidence each), then times, in the same process, reading the window
(Memory.episodes_between: the baseline, what any report of it costs) against reading it and rendering the page
(sentinel.heal.memory_export format=history), and the audit export (format=audit). Targets: the page in
under 2 s and under 2 MB. Part of `make bench`.
"""

from __future__ import annotations

import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any, Callable

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / ".collections")]

from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import (  # noqa: E402
    Attempt,
    Decision,
    Failure,
    PendingPlan,
    Plan,
    PlanSource,
    Step,
    StepResult,
    Verdict,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.audit import audit_records, to_lines  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.history import history_html  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory  # noqa: E402

EPISODES = int(os.environ.get("BENCH_EPISODES", "1000"))
ROUNDS = int(os.environ.get("BENCH_ROUNDS", "5"))
WINDOW_S = 7 * 86400
TARGET_S = 2.0
TARGET_BYTES = 2 * 1024 * 1024
SERVICES = ("nginx", "postgresql", "redis", "haproxy", "memcached")
FACTS = {"service_manager": "systemd", "os": {"id": "debian", "version_id": "12"}}


def _failure(rng: random.Random, host: str, service: str, kind: int) -> Failure:
    summary = (f"{service}: unit {service}.service failed: result exit-code",
               f"{service}: bind() to 0.0.0.0:{rng.randint(1000, 9000)} failed (98: Address already in use)",
               f"{service}: configuration test failed: unknown directive \"server_nmae\" in /etc/{service}/site.conf:{rng.randint(1, 90)}",
               f"{service}: write() to /var/log/{service}/{service}.log failed (28: No space left on device)")[kind]
    log = "\n".join(f"2026-11-22 10:{minute:02d}:00 [error] {summary} request {rng.randint(1, 10**6)}" for minute in range(30))
    return Failure(host=host, service=service, failure_class=("not_running", "port_conflict", "invalid_config", "disk_full")[kind],
                   summary=summary, facts=FACTS, spec={"name": service},
                   evidence={"status": {"command": f"systemctl status {service}", "rc": 3, "output": f"{service} is not running\n{summary}"},
                             "logs": {f"/var/log/{service}/error.log": log}, "port_owners": [], "pidfile": None, "processes": [],
                             "unit": {"Id": f"{service}.service", "cause": summary}})


def _attempt(rng: random.Random, number: int, outcome: str, at: float, service: str, approved_by: str | None = None) -> Attempt:
    start = ("systemctl", "start", service)
    if outcome == "escalated":
        plan = Plan(PlanSource.RUNBOOK, "config-error", "a person fixes the configuration", escalation=f"{service}: its configuration is invalid")
        return Attempt(number=number, diagnosis="invalid configuration", plan=plan, outcome=outcome, started_at=at, finished_at=at + 0.5,
                       artifacts=[f"/state/runs/{number}/evidence"])
    plan = Plan(PlanSource.RUNBOOK, "service-not-running", "start it", (Step("systemctl start {init_service}", start),))
    decision = Decision.APPROVE if outcome == "awaiting_approval" else Decision.ALLOW
    verdicts = [Verdict(" ".join(start), start, decision, "the service's own start", "service-control", True, "v7")]
    if outcome == "awaiting_approval":
        return Attempt(number=number, diagnosis="not running", plan=plan, verdicts=verdicts, policy_version="v7", outcome=outcome,
                       started_at=at, finished_at=at + 0.3)
    took = rng.uniform(1.0, 30.0)
    healed = outcome == "healed"
    result = StepResult(start, "ok" if healed else "failed", rc=0 if healed else 1, duration_s=took - 0.5,
                        stderr="" if healed else f"Job for {service}.service failed because the control process exited with error code.")
    return Attempt(number=number, diagnosis="not running", plan=plan, verdicts=verdicts, policy_version="v7", results=[result],
                   verified=healed, verification={"healthy": healed, "summary": "" if healed else f"{service} is not running"},
                   outcome=outcome, approved_by=approved_by, artifacts=[f"/state/runs/{number}/remediation"], started_at=at, finished_at=at + took)


def fill(memory: Memory, rng: random.Random, now: float) -> None:
    """EPISODES episodes over the last week: 60% incidents healed at once, 15% healed after a failed attempt (two
    episodes), 15% escalated, 10% waiting for approval."""
    written = 0
    while written < EPISODES:
        at = now - rng.uniform(60, WINDOW_S - 60)
        service = rng.choice(SERVICES)
        host = f"web{rng.randint(1, 20)}"
        roll = rng.random()
        incident = f"incident-{written}"
        if roll < 0.60:
            memory.record_attempt(incident_id=incident, failure=_failure(rng, host, service, 0), attempt=_attempt(rng, 1, "healed", at, service))
        elif roll < 0.75 and written + 2 <= EPISODES:
            failure = _failure(rng, host, service, 1)
            memory.record_attempt(incident_id=incident, failure=failure, attempt=_attempt(rng, 1, "failed", at, service))
            memory.record_attempt(incident_id=incident, failure=failure, attempt=_attempt(rng, 2, "healed", at + 40, service, approved_by="alice"))
            written += 1
        elif roll < 0.90:
            memory.record_attempt(incident_id=incident, failure=_failure(rng, host, service, 2), attempt=_attempt(rng, 1, "escalated", at, service))
        else:
            pending = PendingPlan(plan_hash="h", policy_file="policies/default.yml", created_at=at, expires_at=at + 86400)
            memory.record_attempt(incident_id=incident, failure=_failure(rng, host, service, 3),
                                  attempt=_attempt(rng, 1, "awaiting_approval", at, service), pending=pending)
        written += 1


def _timed(work: Callable[[], Any]) -> tuple[float, Any]:
    times, result = [], None
    for _round in range(ROUNDS):
        began = time.perf_counter()
        result = work()
        times.append(time.perf_counter() - began)
    return statistics.median(times), result


def main() -> int:
    rng = random.Random(14)
    now = time.time()
    since = now - WINDOW_S
    with tempfile.TemporaryDirectory() as state_dir, Memory(state_dir) as memory:
        fill(memory, rng, now)
        read_s, episodes = _timed(lambda: memory.episodes_between(since, now))
        page_s, page = _timed(lambda: history_html(memory.episodes_between(since, now), since=since, until=now, title="last 7 days"))
        audit_s, lines = _timed(lambda: to_lines(record for episode in memory.episodes_between(since, now) for record in audit_records(episode)))
    size = len(page.encode())
    incidents = len({episode["incident_id"] for episode in episodes})
    print(f"history report over {len(episodes)} episodes ({incidents} incidents, 7 days, SQLite), median of {ROUNDS} rounds:")
    print(f"  read the window (baseline)      {read_s * 1000:8.1f} ms")
    print(f"  read and render the page        {page_s * 1000:8.1f} ms  ({page_s / read_s:.1f}x the baseline; target < {TARGET_S:g} s: "
          f"{'met' if page_s < TARGET_S else 'MISSED'})")
    print(f"  page size                       {size / 1024:8.1f} KiB ({size} bytes; target < 2 MiB: {'met' if size < TARGET_BYTES else 'MISSED'})")
    print(f"  audit export of the window      {audit_s * 1000:8.1f} ms  ({audit_s / read_s:.1f}x the baseline), "
          f"{lines.count(chr(10))} records, {len(lines.encode()) / 1024:.1f} KiB")
    return 0 if page_s < TARGET_S and size < TARGET_BYTES else 1


if __name__ == "__main__":
    sys.exit(main())
