"""The module_utils names that moved into _guard/ and _host/ stay importable under their old names for one release
(DESIGN.md's contracts): each old name is the moved module itself, private names and monkeypatching included."""

from __future__ import annotations

import importlib

import pytest

PACKAGE = "ansible_collections.sentinel.heal.plugins.module_utils"


@pytest.mark.parametrize(("old", "new"), [("_judge", "_guard.judge"), ("_judge_context", "_guard.context"), ("_executor", "_host.executor"),
                                          ("_probe", "_host.probe"), ("_known_good", "_host.known_good")])
def test_an_old_name_is_the_module_that_moved(old: str, new: str) -> None:
    moved = importlib.import_module(f"{PACKAGE}.{new}")
    assert importlib.import_module(f"{PACKAGE}.{old}") is moved
    assert getattr(importlib.import_module(PACKAGE), old) is moved
    assert moved.__name__ == f"{PACKAGE}.{new}"
