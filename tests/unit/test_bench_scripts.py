"""The benchmarks in bench/ still run, at a fraction of their size, so they cannot rot between
measurements. Nothing here asserts a speed: bench/ reports those."""

from __future__ import annotations

import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]


@pytest.mark.parametrize(
    ("script", "settings", "rows"),
    [
        ("policy_speed.py", {"BENCH_ROUNDS": "1"}, ["shlex.split only (baseline)", "guard decisions", "allow 0,", "target >= 95%"]),
        ("memory_speed.py", {"BENCH_EPISODES": "2000"},
         ["primary-key read (baseline)", "similar errors (FTS5 bm25)", "file size:", "prompt per incident:"]),
        ("knowledge_speed.py", {"BENCH_SCALE": "0.02"},
         ["max |diff| vs numpy float64 forward pass", "(baseline)", "knowledge store:", "Knowledge.query", "with the JMESPath queries",
          "expressions compiled while choosing: 0"]),
        ("report_speed.py", {"BENCH_EPISODES": "60", "BENCH_ROUNDS": "1"},
         ["read the window (baseline)", "read and render the page", "page size", "audit export of the window"]),
    ],
)
def test_a_benchmark_runs_and_prints_its_report(script: str, settings: dict[str, str], rows: list[str]) -> None:
    proc = subprocess.run([sys.executable, str(ROOT / "bench" / script)], cwd=ROOT, env=dict(os.environ, **settings),
                          capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == 0, proc.stdout + proc.stderr
    for row in rows:
        assert row in proc.stdout, (row, proc.stdout)


def test_the_comparisons_rows_align_their_labels_and_say_each_median_and_its_samples() -> None:
    sys.path.insert(0, str(ROOT / "bench"))
    try:
        import medians
    finally:
        sys.path.remove(str(ROOT / "bench"))
    times = {"one job": [2.0, 4.0, 3.0], "two slices on two nodes": [3.0, 1.5]}
    assert medians.median_rows(times) == ["                one job: median 3.00 s (2.00, 4.00, 3.00)",
                                          "two slices on two nodes: median 2.25 s (3.00, 1.50)"]
    assert medians.ratio(times, "two slices on two nodes", "one job") == 0.75
