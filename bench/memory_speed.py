"""Memory at 100,000 episodes: lookup latency, similar-error search, file size, and prompt size.

Fills a memory in a temporary directory with realistic episodes (5,000 fingerprints over 40
services, kilobytes of evidence each), then times, in the same process, the lookups the heal loop
makes per incident against a baseline (a primary-key read of one episode, the cheapest query there
is), and reports the file size per 100k episodes. Then it builds the LLM prompts of realistic
incidents and reports their size in tokens. Targets: lookups p95 under 10 ms, prompts under 3,000
tokens. Part of `make bench`.
"""

from __future__ import annotations

import json
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

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.llm import estimate_tokens  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.prompts import build_messages  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import MEMORY_FILE, Memory  # noqa: E402

EPISODES = int(os.environ.get("BENCH_EPISODES", "100000"))
FINGERPRINTS = 5000
SAMPLES = 2000
TARGET_P95_MS = 10.0
TARGET_PROMPT_TOKENS = 3000
FACTS = {"service_manager": "sysv", "os": {"id": "debian", "version_id": "12"}}
ERRORS = [
    "bind() to 0.0.0.0:{n} failed (98: Address already in use)", "could not open error log file: open() {p} failed (13: Permission denied)",
    "FATAL: could not create lock file {p}: No such file or directory", "write() to {p} failed (28: No space left on device)",
    "Out of memory: Killed process {n} ({s})", "pid file {p} names pid {n}, which is not running",
    "unknown directive \"server_nmae\" in {p}:{n}", "could not connect to server: Connection refused port {n}",
    "certificate has expired notAfter={n}", "E: Could not get lock {p}. It is held by process {n} (apt-get)",
]


def _failure(index: int, rng: random.Random) -> Failure:
    """One of FINGERPRINTS distinct failures (a unit name makes each error text its own)."""
    service = f"svc{index % 40}"
    template = ERRORS[index % len(ERRORS)]
    summary = f"unit{index}: " + template.format(n=rng.randint(1, 65000), p=f"/var/lib/{service}/{index % 7}.dat", s=service)
    log = "\n".join(f"2026-11-22 10:{m:02d}:00 [error] {summary} request {rng.randint(1, 10**6)}" for m in range(20))
    return Failure(
        host=f"web{index % 300}", service=service, failure_class=("not_running", "stale_pidfile", "port_conflict", "unhealthy")[index % 4],
        summary=summary, facts=FACTS, spec={"name": service, "ports": [80], "logs": [f"/var/log/{service}/error.log"]},
        evidence={"status": {"command": f"/etc/init.d/{service} status", "rc": 3, "output": f"{service} is not running"},
                  "logs": {f"/var/log/{service}/error.log": log}, "port_owners": [], "pidfile": None, "processes": []},
    )


def _fill(memory: Memory, rng: random.Random) -> list[Failure]:
    failures = [_failure(index, rng) for index in range(FINGERPRINTS)]
    rows = []
    for number in range(EPISODES):
        failure = failures[number % FINGERPRINTS]
        healed = rng.random() < 0.6
        plan = {"source": "runbook", "reference": "rb", "rationale": "r", "escalation": None,
                "steps": [{"template": "service {init_service} start", "argv": ["service", failure.service, "start"], "may_fail": False}]}
        rows.append((
            f"incident-{number}", 1, failure.host, failure.service, failure.fingerprint, failure.failure_class, failure.summary,
            json.dumps(failure.evidence), "diagnosis", "runbook", "rb", json.dumps(plan), "[]", "v", json.dumps({"steps": []}),
            "healed" if healed else "failed", int(healed), time.time() - number, time.time() - number + 3, "debian", "sysv",
            failure.normalized_error,
        ))
    with memory._transaction():  # one write transaction; the rows go in through sqlite3's own executemany
        memory._conn.executemany(
            """INSERT INTO episodes (incident_id, attempt, host, service, fingerprint, failure_class, error_text, evidence_json,
               diagnosis, plan_source, plan_reference, plan_json, verdicts_json, policy_version, results_json, outcome, verified,
               started_at, finished_at, os_family, service_manager, normalized_error)
               VALUES (?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?, ?)""",
            rows,
        )
    return failures


def _latencies(function: Callable[[Any], Any], arguments: list[Any]) -> tuple[float, float]:
    times = []
    for argument in arguments:
        started = time.perf_counter()
        function(argument)
        times.append((time.perf_counter() - started) * 1000)
    times.sort()
    return statistics.median(times), times[int(len(times) * 0.95)]


def main() -> None:
    rng = random.Random(7)
    with tempfile.TemporaryDirectory(prefix="sentinel-memory-bench-") as directory, Memory(directory) as memory:
        started = time.perf_counter()
        failures = _fill(memory, rng)
        filled = time.perf_counter() - started
        memory._conn.execute("PRAGMA wal_checkpoint(TRUNCATE)")
        size = sum(path.stat().st_size for path in Path(directory).glob(f"{MEMORY_FILE}*"))
        probes = [rng.choice(failures) for _sample in range(SAMPLES)]
        ids = [rng.randint(1, EPISODES) for _sample in range(SAMPLES)]
        baseline = _latencies(memory.episode, ids)
        rows = [
            ("verified fix for the fingerprint", _latencies(lambda f: memory.verified_fix(f.fingerprint), probes)),
            ("failed plans of the fingerprint", _latencies(lambda f: memory.unhealed(f.fingerprint, since=0), probes)),
            ("similar errors (FTS5 bm25)", _latencies(memory.similar_fixes, probes)),
        ]
        print(f"memory with {EPISODES:,} episodes ({FINGERPRINTS:,} fingerprints), filled in {filled:.1f} s")
        print(f"  primary-key read (baseline)          p50 {baseline[0]:6.3f} ms  p95 {baseline[1]:6.3f} ms")
        for name, (p50, p95) in rows:
            verdict = "met" if p95 < TARGET_P95_MS else "MISSED"
            print(f"  {name:<37} p50 {p50:6.3f} ms  p95 {p95:6.3f} ms  ({p95 / baseline[1]:.1f}x baseline)  "
                  f"target p95 < {TARGET_P95_MS:.0f} ms: {verdict}")
        print(f"  file size: {size / 2**20:.1f} MiB for {EPISODES:,} episodes ({size / EPISODES / 1024:.2f} KiB per episode)")

        tokens = []
        for failure in failures[:200]:
            outputs = {"nginx -t": "nginx: the configuration file /etc/nginx/nginx.conf syntax is ok\n" * 3,
                       "ss -ltnp": "\n".join(f"LISTEN 0 511 0.0.0.0:{port} 0.0.0.0:* users:((\"svc\",pid={port},fd=6))" for port in range(20))}
            failed = sorted({earlier.templates for earlier in memory.unhealed(failure.fingerprint, since=0) if earlier.outcome == "failed"})
            messages = build_messages(failure, outputs=outputs, similar_fixes=memory.similar_fixes(failure), failed_plans=failed, knowledge=[])
            tokens.append(sum(estimate_tokens(m["content"]) for m in messages))
        tokens.sort()
        worst = tokens[-1]
        print(f"  prompt per incident: median {statistics.median(tokens):.0f} tokens, max {worst} "
              f"(estimated at 4 characters per token)  target < {TARGET_PROMPT_TOKENS:,}: {'met' if worst < TARGET_PROMPT_TOKENS else 'MISSED'}")


if __name__ == "__main__":
    main()
