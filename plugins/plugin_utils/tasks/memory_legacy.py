"""The deprecated sentinel.heal.memory: each of its operations done by the function of the module that replaces it
(tasks/memory.py), with a deprecation warning that names that module and its form. This file goes with the module."""

from __future__ import annotations

from typing import Any, Mapping

from ansible.plugins.action import ActionBase
from ansible.utils.display import Display

from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.memory import (
    EPISODE_FILTER_NAMES,
    EPISODE_FILTERS,
    MEMORY_SPEC,
    PLAN_STATUS_OPTION,
    Operation,
    check_ranges,
    deny,
    export,
    info,
    on_memory,
    prune,
    reset_flapping,
    silence,
    suspension,
)

display = Display()

# Each operation of sentinel.heal.memory: the function that does it now, the module and form that replace it, what that
# form says instead of the operation, and the options the operation reads (it ignored the others, so they are dropped).
_LEGACY: dict[str, tuple[Operation, str, dict[str, Any], tuple[str, ...]]] = {
    "episodes": (info, "memory_info (kind: episodes)", {"kind": "episodes"}, (*EPISODE_FILTER_NAMES, "limit")),
    "episode": (info, "memory_info (episode_id)", {"kind": "episodes"}, ("episode_id",)),
    "search": (info, "memory_info (text)", {"kind": "episodes"}, ("text", "limit")),
    "plans": (info, "memory_info (kind: plans)", {"kind": "plans"}, ("status",)),
    "plan": (info, "memory_info (kind: plans, plan_id)", {"kind": "plans"}, ("plan_id",)),
    "silences": (info, "memory_info (kind: silences)", {"kind": "silences"}, ()),
    "suspension": (info, "memory_info (kind: suspension)", {"kind": "suspension"}, ()),
    "export": (export, "memory_export (format: episodes)", {"format": "episodes"}, ("dest", *EPISODE_FILTER_NAMES, "limit")),
    "export audit": (export, "memory_export (format: audit)", {"format": "audit"}, ("dest", "days")),
    "report": (export, "memory_export (format: history)", {"format": "history"}, ("dest", "days")),
    "prune": (prune, "memory_prune (older_than_days)", {}, ("older_than_days",)),
    "forget": (prune, "memory_prune (fingerprint)", {}, ("fingerprint",)),
    "deny": (deny, "approval (decision: denied)", {"decision": "denied"}, ("plan_id", "decided_by", "note")),
    "suspend": (suspension, "suspension (state: present)", {"state": "present"}, ("decided_by", "note")),
    "resume": (suspension, "suspension (state: absent)", {"state": "absent"}, ("decided_by",)),
    "reset_flapping": (reset_flapping, "flapping_reset", {}, ("host", "service", "decided_by")),
    "silence": (silence, "silence (state: present)", {"state": "present"}, ("host", "service", "duration", "decided_by", "note")),
    "unsilence": (silence, "silence (state: absent)", {"state": "absent"}, ("host", "service", "silence_id", "decided_by")),
}


LEGACY_OPERATIONS = ["episodes", "episode", "search", "export", "report", "prune", "forget", "plans", "plan", "deny",
                     "suspend", "resume", "suspension", "reset_flapping", "silence", "unsilence", "silences"]

LEGACY_SPEC: dict[str, Any] = dict(
    operation=dict(type="str", required=True, choices=LEGACY_OPERATIONS),
    **MEMORY_SPEC,
    episode_id=dict(type="int"),
    **EPISODE_FILTERS,
    text=dict(type="str"),
    dest=dict(type="path"),
    format=dict(type="str", default="episodes", choices=["episodes", "audit"]),
    days=dict(type="float"),
    older_than_days=dict(type="float"),
    plan_id=dict(type="str"),
    status=PLAN_STATUS_OPTION,
    decided_by=dict(type="str"),
    note=dict(type="str", default=""),
    duration=dict(type="str"),
    silence_id=dict(type="int"),
)

LEGACY_REQUIRED_IF = [
    ("operation", "episode", ["episode_id"]),
    ("operation", "search", ["text"]),
    ("operation", "report", ["dest"]),
    ("operation", "prune", ["older_than_days"]),
    ("operation", "forget", ["fingerprint"]),
    ("operation", "plan", ["plan_id"]),
    ("operation", "deny", ["plan_id", "decided_by"]),
    ("operation", "suspend", ["decided_by", "note"]),
    ("operation", "resume", ["decided_by"]),
    ("operation", "reset_flapping", ["host", "service", "decided_by"]),
    ("operation", "silence", ["host", "duration", "decided_by", "note"]),
    ("operation", "unsilence", ["decided_by", "host", "silence_id"], True),
]


class LegacyMemoryAction(ActionBase):
    """The action of the deprecated sentinel.heal.memory: each operation done by the module that replaces it, with a
    deprecation warning that names that module and its form."""

    TRANSFERS_FILES = False
    _requires_connection = False
    argument_spec: dict[str, Any] = LEGACY_SPEC

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=self.argument_spec, required_if=LEGACY_REQUIRED_IF)
        # before the operation, so that a task that fails shows it too
        display.deprecated(legacy_replacement(args), version="1.0.0", collection_name="sentinel.heal")
        result.update(perform_legacy(args, check_mode=bool(self._task.check_mode), task_vars=task_vars or {}))
        return result


def legacy_replacement(args: Mapping[str, Any]) -> str:
    """What to write instead of the deprecated form: the operation, and the module and form that replace it."""
    return f"operation={args['operation']}: use sentinel.heal.{_legacy(args)[1]}"


def perform_legacy(args: Mapping[str, Any], *, check_mode: bool, task_vars: Mapping[str, Any]) -> dict[str, Any]:
    """An operation of the deprecated sentinel.heal.memory, done by the function of the module that replaces it with
    the arguments that module would take; the ranges checked as the memory module always did (every option, whatever
    the operation)."""
    do, _replacement, fixed, reads = _legacy(args)
    check_ranges(args)
    return on_memory(do, {**{name: args[name] for name in (*MEMORY_SPEC, *reads)}, **fixed}, check_mode=check_mode, task_vars=task_vars)


def _legacy(args: Mapping[str, Any]) -> tuple[Operation, str, dict[str, Any], tuple[str, ...]]:
    operation = args["operation"]
    return _LEGACY[f"{operation} audit" if (operation, args["format"]) == ("export", "audit") else operation]
