"""Knowledge base speed: embedding throughput and query latency, each against a baseline run in the same process.

* Building the ONNX model from the packaged safetensors: seconds, and how far its vectors are from an
  independent numpy forward pass (float64) of the same weights and from ChromaDB's stock function.
* Embedding throughput of short docs (target: at least 100 docs/s on 2 cores). Baseline: ChromaDB's
  own ONNXMiniLM_L6_V2 pointed at the same model files, which pads every input to 256 tokens.
* Query latency at 10,000 chunks once the model is loaded (target: p95 under 100 ms). Baseline: the
  embedding of the query alone, so the ratio shows what the store (HNSW search, the chunks' text,
  ranking by the query's words) adds.
* The runbooks: loading the shipped library (every JMESPath query and var compiled then), and choosing
  the runbooks that match an incident, over six incidents of the lab's faults. Baseline: the same
  choice with the runbooks' JMESPath queries left out (their regex, class and reading conditions
  only), so the ratio shows what the queries over the incident document add; the expressions
  compiled while choosing are counted (0: compiled once, at load).

The 10,000 chunks are made up but read like operations notes: 500 Markdown files of 20 sections about
services, their errors, paths, commands and fixes, ingested through Knowledge.ingest like a user's docs.
Takes about 2 minutes. Run: .venv/bin/python bench/knowledge_speed.py
"""

from __future__ import annotations

import dataclasses
import functools
import os
import random
import statistics
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / ".collections"), str(ROOT / "tests")]

from minilm_reference import SENTENCES, reference_embedding  # noqa: E402
from safetensors.numpy import load_file  # noqa: E402
from tokenizers import Tokenizer  # noqa: E402

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.embeddings import (  # noqa: E402
    MAX_TOKENS,
    MiniLMEmbedder,
    build_minilm_onnx,
    default_model_dir,
    packaged_model_files,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.knowledge import Knowledge  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.reading import Reading, read_failure  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import Runbook, RunbookLibrary  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import PolicyContext, load_policy  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.diagnose import package_dir  # noqa: E402

# BENCH_SCALE shrinks every size (the test suite runs the benchmark at 0.05 so it cannot rot)
SCALE = float(os.environ.get("BENCH_SCALE", "1"))
SHORT_DOCS = max(16, int(1_000 * SCALE))
STOCK_DOCS = max(8, int(300 * SCALE))  # the stock function takes about 55 s per 1,000 short docs here
FILES, SECTIONS = max(2, int(500 * SCALE)), 20
QUERIES = max(10, int(200 * SCALE))
TARGET_DOCS_PER_SECOND = 100
TARGET_P95_MS = 100.0

SERVICES = ["nginx", "postgresql", "redis", "mysql", "apache2", "sshd", "cron", "haproxy", "memcached", "rabbitmq", "php-fpm",
            "gunicorn", "elasticsearch", "docker", "kubelet", "bind9", "postfix", "dovecot", "grafana", "prometheus"]
ERRORS = [
    "bind() to 0.0.0.0:{port} failed (98: Address already in use)", "No space left on device", "Permission denied",
    'could not open file "{path}": No such file or directory', "connect() failed (111: Connection refused) while connecting to upstream",
    "Too many open files", "Out of memory: Killed process {pid} ({service})", "SSL certificate has expired",
    "upstream timed out (110: Connection timed out) while reading response header", "FATAL: the database system is in recovery mode",
    "MISCONF Redis is configured to save RDB snapshots, but it's currently unable to persist to disk", "segfault at 0 ip {pid} error 4",
    "pid file {path} exists but the process is not running", "unknown directive \"server_nmae\" in {path}:{port}",
    "could not create shared memory segment: Cannot allocate memory", "disk quota exceeded", "read-only file system",
    "certificate verify failed: unable to get local issuer certificate", "Name or service not known", "too many connections",
]
FIXES = [
    "kill the process that holds the port and start {service} again", "free space in /var/log and rotate the logs",
    "raise LimitNOFILE in the unit and restart {service}", "renew the certificate and reload {service}",
    "remove the stale pid file {path} and start the service", "fix the typo in {path} and run the config test first",
    "give the data directory back to the {service} user with chown", "restore the last base backup and replay the WAL",
    "add swap or lower the worker count", "point the resolver at the internal DNS servers", "truncate the log that filled the disk",
    "increase max_connections and restart during the maintenance window", "remount the file system read-write after fsck",
]
TOPICS = ["startup", "ports", "logs", "disk", "memory", "certificates", "upgrades", "backups", "monitoring", "permissions",
          "configuration", "networking", "limits", "replication", "restarts", "alerts", "dependencies", "on-call", "capacity", "security"]
PATHS = ["/etc/{service}/{service}.conf", "/var/log/{service}/error.log", "/run/{service}.pid", "/var/lib/{service}", "/etc/default/{service}"]
COMMANDS = ["service {service} status", "ss -ltnp 'sport = :{port}'", "df -h /var", "journalctl -u {service} -n 50", "{service} -t",
            "tail -n 100 /var/log/{service}/error.log", "ls -l /run/{service}.pid", "free -m", "ulimit -n", "openssl x509 -enddate -noout"]


def fill(template: str, rng: random.Random, service: str) -> str:
    return template.format(service=service, port=rng.choice([80, 443, 5432, 6379, 3306, 8080, 9090]), pid=rng.randint(300, 65000),
                           path=rng.choice(PATHS).format(service=service))


def ops_sentence(rng: random.Random) -> str:
    service = rng.choice(SERVICES)
    error = fill(rng.choice(ERRORS), rng, service)
    return rng.choice([
        f"{service} on web{rng.randint(1, 40)} logs: {error}",
        f"After the deploy {service} failed with {error}.",
        f"{error} - seen on db{rng.randint(1, 9)} for {service}",
        f"Alert: {service} down, {error}",
    ])


def ops_section(rng: random.Random, service: str) -> str:
    error = fill(rng.choice(ERRORS), rng, service)
    command = fill(rng.choice(COMMANDS), rng, service)
    fix = fill(rng.choice(FIXES), rng, service)
    return rng.choice([
        f"When {service} logs `{error}`, run `{command}` to see why; usually the fix is to {fix}.",
        f"Seen on host{rng.randint(1, 99)} in week {rng.randint(1, 52)}: {error}. We had to {fix}. Check with `{command}` afterwards.",
        f"{service} will not start if {error.lower()}. First `{command}`, then {fix}; page the owner if it happens twice.",
    ])


def write_corpus(directory: Path, rng: random.Random) -> None:
    for number in range(FILES):
        service = SERVICES[number % len(SERVICES)]
        sections = [f"## {topic} ({service}, note {number})\n\n{ops_section(rng, service)}\n" for topic in rng.sample(TOPICS, SECTIONS)]
        (directory / f"{service}-{number:03}.md").write_text(f"# {service} operations notes {number}\n\n" + "\n".join(sections))


def per_second(function, docs: list[str]) -> float:  # type: ignore[no-untyped-def]
    started = time.perf_counter()
    function(docs)
    return len(docs) / (time.perf_counter() - started)


def percentile(samples: list[float], fraction: float) -> float:
    ordered = sorted(samples)
    return ordered[min(len(ordered) - 1, round(fraction * (len(ordered) - 1)))]


def main() -> None:
    from chromadb.utils.embedding_functions import ONNXMiniLM_L6_V2

    rng = random.Random(7)
    with tempfile.TemporaryDirectory() as scratch:
        started = time.perf_counter()
        build_minilm_onnx(Path(scratch) / "model")
        conversion = time.perf_counter() - started
    model_dir = build_minilm_onnx(default_model_dir()).parent
    embedder = MiniLMEmbedder(model_dir)
    stock = ONNXMiniLM_L6_V2()
    stock.DOWNLOAD_PATH = model_dir  # the same files: nothing is downloaded

    source = packaged_model_files()
    tokenizer = Tokenizer.from_file(str(source / "tokenizer.json"))
    tokenizer.no_padding()
    tokenizer.enable_truncation(max_length=MAX_TOKENS)
    weights = load_file(str(source / "model.safetensors"))
    reference = np.array([reference_embedding(text, weights, tokenizer) for text in SENTENCES])
    reference_diff = float(np.abs(np.array(embedder.embed(SENTENCES)) - reference).max())

    docs = [ops_sentence(rng) for _doc in range(SHORT_DOCS)]
    embedder.embed(docs[:8])
    stock(docs[:8])  # both loaded and warm
    ours_rate = per_second(embedder.embed, docs)
    ours_same = per_second(embedder.embed, docs[:STOCK_DOCS])
    stock_rate = per_second(stock, docs[:STOCK_DOCS])
    stock_diff = float(np.abs(np.array(stock(docs[:64])) - np.array(embedder.embed(docs[:64]))).max())

    print(f"model conversion (safetensors -> ONNX, fresh directory)   {conversion:6.2f} s")
    print(f"agreement: max |diff| vs numpy float64 forward pass       {reference_diff:.1e}  ({len(SENTENCES)} texts)")
    print(f"           max |diff| vs ChromaDB's stock function        {stock_diff:.1e}  (64 docs)")
    print(f"embedding {SHORT_DOCS} short docs (mean {statistics.mean(map(len, docs)):.0f} chars), {embedder.threads} threads")
    print(f"  ChromaDB ONNXMiniLM_L6_V2, pads to 256 (baseline)   {stock_rate:8.1f} docs/s  ({STOCK_DOCS} docs)")
    print(f"  MiniLMEmbedder, pads per batch                      {ours_same:8.1f} docs/s  "
          f"({STOCK_DOCS} docs, {ours_same / stock_rate:.1f}x the baseline)")
    print(f"  MiniLMEmbedder, all {SHORT_DOCS}                            {ours_rate:8.1f} docs/s  "
          f"target >= {TARGET_DOCS_PER_SECOND}: {'met' if ours_rate >= TARGET_DOCS_PER_SECOND else 'MISSED'}")

    with tempfile.TemporaryDirectory() as scratch:
        corpus = Path(scratch) / "docs"
        corpus.mkdir()
        write_corpus(corpus, rng)
        with Knowledge(Path(scratch) / "knowledge", embedder) as knowledge:
            started = time.perf_counter()
            report = knowledge.ingest([corpus])
            ingest_seconds = time.perf_counter() - started
            chunks = knowledge.count()
            started = time.perf_counter()
            again = knowledge.ingest([corpus])
            reingest_seconds = time.perf_counter() - started
            queries = [ops_sentence(rng) for _query in range(QUERIES)]
            knowledge.query(queries[0])
            store_ms, embed_ms = [], []
            for query in queries:
                started = time.perf_counter()
                embedder.embed([query])
                embed_ms.append((time.perf_counter() - started) * 1000)
                started = time.perf_counter()
                knowledge.query(query, k=4)
                store_ms.append((time.perf_counter() - started) * 1000)
            size_mb = sum(path.stat().st_size for path in (Path(scratch) / "knowledge").rglob("*") if path.is_file()) / 1e6

    p50, p95 = percentile(store_ms, 0.50), percentile(store_ms, 0.95)
    e50, e95 = percentile(embed_ms, 0.50), percentile(embed_ms, 0.95)
    print(f"knowledge store: {chunks:,} chunks from {FILES} files, ingested in {ingest_seconds:.1f} s "
          f"({report.totals()['added'] / ingest_seconds:.0f} chunks/s), {size_mb:.0f} MB on disk; "
          f"ingesting again: {reingest_seconds:.2f} s, changed={again.changed}")
    print(f"query latency, k=4, {QUERIES} queries")
    print(f"  embedding the query alone (baseline)   p50 {e50:6.1f} ms   p95 {e95:6.1f} ms")
    print(f"  Knowledge.query                        p50 {p50:6.1f} ms   p95 {p95:6.1f} ms  ({p95 / e95:.1f}x the baseline at p95)  "
          f"target p95 < {TARGET_P95_MS:.0f} ms: {'met' if p95 < TARGET_P95_MS else 'MISSED'}")
    runbook_matching()


def incidents() -> list[tuple[Failure, Reading]]:
    """Incidents of the lab's faults as service_check reports them, each with the reading heal makes of it."""
    nginx = {"name": "nginx", "ports": [80], "process": "nginx", "pidfile": "/run/nginx.pid", "logs": ["/var/log/nginx/error.log"]}
    redis = {"name": "redis", "service": "redis-server", "ports": [6379], "process": "redis-server", "user": "redis",
             "logs": ["/var/log/redis/redis-server.log"], "paths": ["/var/lib/redis", "/run/redis"]}
    here = {"/var/lib/redis": {"path": "/var/lib/redis", "exists": True, "owner": "redis", "group": "redis", "mode": "0750"},
            "/run/redis": {"path": "/run/redis", "exists": False}}

    def failure(spec: dict[str, Any], failure_class: str, journal: str = "", **evidence: Any) -> Failure:
        unit = {"Id": f"{spec.get('service', spec['name'])}.service", "RuntimeDirectory": spec["name"],
                "journal": "\n".join(f"2026-11-25T08:00:00+0000 lab {line}" for line in journal.splitlines())}
        declared = [here[path] for path in spec.get("paths", [])]
        return Failure(host="lab", service=spec["name"], failure_class=failure_class, summary="",
                       evidence={"status": {"output": ""}, "logs": {}, "port_owners": [], "processes": [], "paths": declared,
                                 "disk": [], "unit": unit, **evidence}, spec=spec, facts={"service_manager": "systemd"})

    squatter = [{"port": 6379, "pid": 4242, "process": "python3", "cmdline": "python3 -m http.server 6379"}]
    cases = [
        failure(nginx, "stale_pidfile", pidfile={"path": "/run/nginx.pid", "exists": True, "pid": 812, "alive": False}),
        failure(nginx, "not_running", 'nginx[9]: [emerg] open() "/var/log/nginx/error.log" failed (28: No space left on device)',
                disk=[{"path": "/var/log/nginx", "full": False, "inodes_exhausted": True}]),
        failure(nginx, "not_running", 'nginx[9]: [emerg] open() "/var/log/nginx/error.log" failed (2: No such file or directory)'),
        failure(redis, "restart_loop", "redis-server[9]: >>> 'dir /var/lib/redis'\nredis-server[9]: No such file or directory",
                paths=[{"path": "/var/lib/redis", "exists": False}, here["/run/redis"]]),
        failure(redis, "restart_loop", "redis-server[9]: Can't open the log file: Permission denied"),
        failure(redis, "restart_loop", port_owners=squatter),
    ]
    policy = load_policy()
    return [(case, read_failure(case, {}, locate=functools.partial(package_dir, policy, PolicyContext.from_failure(case))))
            for case in cases]


def choose(runbooks: tuple[Runbook, ...], cases: list[tuple[Failure, Reading]]) -> list[list[str]]:
    """The ids of the runbooks that match each incident (as the planner asks each candidate)."""
    return [[rb.id for rb in runbooks if rb.applies_to(case) and rb.matches(case, {}, reading)] for case, reading in cases]


def runbook_matching() -> None:
    import jmespath

    rounds = max(5, int(500 * SCALE))
    started = time.perf_counter()
    library = RunbookLibrary.load()
    load_ms = (time.perf_counter() - started) * 1000
    queried = sum(1 for rb in library.runbooks if rb.queries or rb.variables)
    without_queries = tuple(dataclasses.replace(rb, queries=()) for rb in library.runbooks)
    cases = incidents()
    compiled = 0
    original = jmespath.compile

    def counting(expression: str) -> Any:
        nonlocal compiled
        compiled += 1
        return original(expression)

    jmespath.compile = counting
    try:
        chosen = choose(library.runbooks, cases)
        timings: dict[str, list[float]] = {"baseline": [], "queries": []}
        for _round in range(rounds):
            for name, runbooks in (("baseline", without_queries), ("queries", library.runbooks)):
                started = time.perf_counter()
                choose(runbooks, cases)
                timings[name].append((time.perf_counter() - started) * 1e6 / len(cases))
    finally:
        jmespath.compile = original
    baseline, queries = statistics.median(timings["baseline"]), statistics.median(timings["queries"])
    print(f"runbooks: {len(library.runbooks)} loaded in {load_ms:.1f} ms ({queried} with JMESPath queries or vars, compiled then)")
    print(f"choosing the matching runbooks, {len(cases)} incidents x {rounds} rounds, per incident")
    print(f"  regex, class and reading conditions only (baseline)   {baseline:8.1f} us")
    print(f"  with the JMESPath queries                             {queries:8.1f} us  ({queries / baseline:.2f}x the baseline); "
          f"expressions compiled while choosing: {compiled}")
    print(f"  matched: {'; '.join(', '.join(ids) or '-' for ids in chosen)}")


if __name__ == "__main__":
    main()
