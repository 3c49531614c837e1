"""The deprecated sentinel.heal.memory (plugin_utils/tasks/memory_legacy.py): every operation becomes a valid task of the
module that replaces it, as its warning names it, and the ranges are checked as they always were."""

from __future__ import annotations

import importlib
from pathlib import Path
from typing import Any

import pytest
from ansible.errors import AnsibleActionFail
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks import memory_legacy

PLUGINS = Path(__file__).resolve().parents[5] / "plugins"


# A typical task of each deprecated form, with the options it needs.
OLD_FORMS = {
    "episodes": {"host": "web1", "outcome": "healed"}, "episode": {"episode_id": 1}, "search": {"text": "bind"},
    "export": {"dest": "/tmp/x.json"}, "report": {"dest": "/tmp/x.html", "days": 7.0}, "prune": {"older_than_days": 30.0},
    "forget": {"fingerprint": "f"}, "plans": {"status": "all"}, "plan": {"plan_id": "p"},
    "deny": {"plan_id": "p", "decided_by": "alice"}, "suspend": {"decided_by": "alice", "note": "failover"},
    "resume": {"decided_by": "alice"}, "suspension": {}, "reset_flapping": {"host": "web1", "service": "nginx", "decided_by": "alice"},
    "silence": {"host": "web1", "duration": "2h", "decided_by": "alice", "note": "swap"},
    "unsilence": {"host": "web1", "decided_by": "alice"}, "silences": {},
}


def _validated(spec: dict[str, Any], args: dict[str, Any], **rules: Any) -> dict[str, Any]:
    result = ArgumentSpecValidator(spec, **rules).validate(args)
    assert not result.error_messages, result.error_messages
    return dict(result.validated_parameters)


@pytest.mark.parametrize(("operation", "form"), [*((operation, "episodes") for operation in OLD_FORMS), ("export", "audit")])
def test_every_deprecated_operation_becomes_a_valid_task_of_the_module_its_warning_names(
        operation: str, form: str, monkeypatch: pytest.MonkeyPatch) -> None:
    old = _validated(memory_legacy.LEGACY_SPEC, {"operation": operation, "format": form, **OLD_FORMS[operation]},
                     required_if=memory_legacy.LEGACY_REQUIRED_IF)
    warning = memory_legacy.legacy_replacement(old)
    module = warning.split("use sentinel.heal.")[1].split()[0]
    assert warning.startswith(f"operation={operation}: use sentinel.heal.{module}")
    assert (PLUGINS / "modules" / f"{module}.py").is_file()
    action = importlib.import_module(f"ansible_collections.sentinel.heal.plugins.action.{module}")
    # what the operation's function receives is what the new module accepts, written as the warning says
    received: dict[str, Any] = {}
    monkeypatch.setattr(memory_legacy, "on_memory", lambda do, args, **_kw: received.update(args=args, do=do) or {})
    memory_legacy.perform_legacy(old, check_mode=False, task_vars={})
    given = {name: value for name, value in received["args"].items() if value is not None and value != action.ARGUMENT_SPEC[name].get("default")}
    constants = (("required_if", "REQUIRED_IF"), ("mutually_exclusive", "MUTUALLY_EXCLUSIVE"), ("required_one_of", "ONE_OF"))
    rules = {name: getattr(action, constant) for name, constant in constants if hasattr(action, constant)}
    new = _validated(action.ARGUMENT_SPEC, given, **rules)
    assert received["args"] == {name: new[name] for name in received["args"]}
    for key, value in {name: new[name] for name in ("kind", "format", "state", "decision") if name in new}.items():
        assert f"{key}: {value}" in warning or value == action.ARGUMENT_SPEC[key]["default"], (key, value, warning)


def test_the_deprecated_module_checks_every_range_whatever_the_operation_as_it_always_did() -> None:
    old = _validated(memory_legacy.LEGACY_SPEC, {"operation": "suspend", "decided_by": "a", "note": "n", "limit": 0},
                     required_if=memory_legacy.LEGACY_REQUIRED_IF)
    with pytest.raises(AnsibleActionFail, match=r"^limit: 0 is out of range \(1-100000\)$"):
        memory_legacy.perform_legacy(old, check_mode=True, task_vars={})
