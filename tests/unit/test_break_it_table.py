"""tests/README.md's table of promises names, for each one, the tests that fail when it is broken. A test moved or
renamed without its row leaves a promise pointing at nothing: every `file.py::test_name` the table names must be a
test defined in that file, and every test file it names must exist."""

from __future__ import annotations

import re
from collections import defaultdict
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]
REFERENCE = re.compile(r"`([\w/.]*test_\w+\.py)?(?:::(test_\w+))?[^`]*`")


def _test_files() -> dict[str, set[str]]:
    defined: dict[str, set[str]] = defaultdict(set)
    for path in TESTS.rglob("test_*.py"):
        defined[path.relative_to(TESTS).as_posix()] = set(re.findall(r"^(?:async )?def (test_\w+)", path.read_text(), re.M))
    return defined


def _files_named(path: str, defined: dict[str, set[str]]) -> list[str]:
    return [name for name in defined if name == path or name.endswith("/" + path)]


def test_every_test_the_promises_table_names_is_defined_where_it_says() -> None:
    defined = _test_files()
    broken = []
    for line_number, line in enumerate((TESTS / "README.md").read_text().splitlines(), 1):
        files: list[str] = []
        for match in REFERENCE.finditer(line):
            path, test = match.groups()
            if path:
                files = _files_named(path, defined)
                if not files:
                    broken.append(f"line {line_number}: no test file {path}")
            if test and files and not any(test in defined[name] for name in files):
                broken.append(f"line {line_number}: {test} is not in {', '.join(files)}")
    assert not broken, "tests/README.md names tests that are not there:\n" + "\n".join(broken)
