"""Every figure README.md states that a command can measure is checked against what the build produces, or is not
stated as a figure (tests/readme_figures.py)."""

from __future__ import annotations

from pathlib import Path

from readme_figures import CHECKED, MEASURED, about, readme_text, stated


def test_the_readme_states_no_measurable_figure_that_no_test_checks() -> None:
    text = " ".join(readme_text().split())
    checked_spans = [found.span() for pattern, _test in CHECKED.values() for found in pattern.finditer(text)]
    unchecked = [found.group(0) for found in MEASURED.finditer(text)
                 if not any(start <= found.start() < end for start, end in checked_spans)]
    assert unchecked == [], f"figures README.md states that no test checks: {unchecked} (check them in tests/readme_figures.py, or say them in words)"


def test_the_tarball_is_the_size_the_readme_says(collection_tarball: Path) -> None:
    size_kb = collection_tarball.stat().st_size / 1000
    assert about(size_kb, stated("tarball")), f"the tarball is {size_kb:.0f} KB, README.md says about {stated('tarball')} KB"
