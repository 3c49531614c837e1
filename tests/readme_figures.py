"""The figures README.md states that a command can measure (sizes, times, ratios, counts of tests), for the tests that
hold each against what the build produces: a figure no test checks drifts (the tarball was said to be 640 KB at 700).

``MEASURED`` finds every such figure in the README; ``CHECKED`` names the ones a test holds, each by the sentence it
stands in, and the test that does: any other figure fails tests/platform/test_readme_figures.py (say it in words, or
check it).
"""

from __future__ import annotations

import re
from pathlib import Path

README = Path(__file__).resolve().parents[1] / "README.md"
MEASURED = re.compile(
    r"(?<![\w.-])~?\d+(?:[.,]\d+)?\s?(?:KB|MB|GB|KiB|MiB|GiB|ms|s|sec|seconds?|min|minutes?|h|hours?)(?!\w)"
    r"|(?<![\w.-])\d+(?:\.\d+)?x(?!\w)"
    r"|(?<![\w.-])\d[\d,]*\s+(?:unit|integration|platform|lab)\s+tests")
CHECKED = {
    "tarball": (re.compile(r"The tarball is about (?P<kb>\d+) KB"), "platform/test_readme_figures.py"),
    "virtualenv": (re.compile(r"a new virtualenv with it and the model: about (?P<mb>\d+) MB"), "integration/test_user_path_lab.py"),
}
# how far a measured size may be from the "about" the README says
TOLERANCE = 0.15


def readme_text() -> str:
    return README.read_text(encoding="utf-8")


def stated(name: str) -> int:
    """The number the README states for the checked figure ``name``."""
    pattern, _test = CHECKED[name]
    found = pattern.search(" ".join(readme_text().split()))
    assert found, f"README.md no longer says {pattern.pattern!r}: update tests/readme_figures.py with it"
    return int(next(iter(found.groupdict().values())))


def about(measured: float, said: float) -> bool:
    return abs(measured - said) <= TOLERANCE * said
