"""Each module an action plugin runs documents exactly the options its action takes: its own DOCUMENTATION and the
collection's fragments it extends (as ansible-doc shows them) against the action's argument spec, which is written
once (plugin_utils/loop/options.py, or beside its task in plugin_utils/tasks/)."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
import yaml

PLUGINS = Path(__file__).resolve().parents[4] / "plugins"
PREFIX = "ansible_collections.sentinel.heal.plugins"
# the actions that validate an argument spec of their own (service_check's is the module's)
ACTIONS = sorted(path.stem for path in (PLUGINS / "action").glob("*.py") if path.stem != "service_check")


def documented_options(name: str) -> dict[str, Any]:
    """The options of a module as ansible-doc shows them: its own and those of the collection's fragments it extends."""
    documentation = yaml.safe_load(importlib.import_module(f"{PREFIX}.modules.{name}").DOCUMENTATION)
    options: dict[str, Any] = {}
    for fragment in documentation.get("extends_documentation_fragment") or ():
        if not fragment.startswith("sentinel.heal."):
            continue
        file, _dot, part = fragment.removeprefix("sentinel.heal.").partition(".")
        text = getattr(importlib.import_module(f"{PREFIX}.doc_fragments.{file}").ModuleDocFragment, part.upper() or "DOCUMENTATION")
        options.update(yaml.safe_load(text).get("options") or {})
    options.update(documentation.get("options") or {})
    return options


def test_every_action_but_the_checks_validates_a_spec() -> None:
    assert {"heal", "plan", "diagnose", "execute", "knowledge", "policy_check", "memory_info"} <= set(ACTIONS)


@pytest.mark.parametrize("name", ACTIONS)
def test_each_module_documents_exactly_the_options_its_action_takes(name: str) -> None:
    spec = importlib.import_module(f"{PREFIX}.action.{name}").ActionModule.argument_spec
    documented = documented_options(name)
    assert sorted(documented) == sorted(spec)
    for option, rules in spec.items():
        doc = documented[option]
        if "options" in rules:  # a dict of suboptions: its default is theirs (the documentation shows each)
            rules = {key: value for key, value in rules.items() if key != "default"}
            doc = {key: value for key, value in doc.items() if key != "default"}
        assert (doc.get("type", "str"), bool(doc.get("required")), doc.get("default"), sorted(doc.get("choices") or [])) == (
            rules.get("type", "str"), bool(rules.get("required")), rules.get("default"), sorted(rules.get("choices") or [])), option
