"""The rows of a benchmark that compares ways of doing one thing: each way's median and samples, and one ratio."""

from __future__ import annotations

import statistics


def median_rows(times: dict[str, list[float]]) -> list[str]:
    """One row per way, labels aligned: ``label: median 1.23 s (1.20, 1.23, 1.31)``."""
    width = max(len(label) for label in times)
    return [f"{label:>{width}}: median {statistics.median(values):.2f} s ({', '.join(f'{value:.2f}' for value in values)})"
            for label, values in times.items()]


def ratio(times: dict[str, list[float]], way: str, baseline: str) -> float:
    """The median of ``way`` over the median of ``baseline``."""
    return statistics.median(times[way]) / statistics.median(times[baseline])
