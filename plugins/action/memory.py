# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.memory: reads, exports, prunes and decides what the controller's memory holds."""

from __future__ import annotations

import fnmatch
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import SentinelError
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.runner import remove_runs
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.silences import ALL_SERVICES, silence_seconds
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard import approvals
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.secrets import redact
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.audit import audit_records, write_audit
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.history import history_html
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.page import utc
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import (
    MEMORY_OPTIONS,
    OUTCOMES,
    PLAN_STATUSES,
    Memory,
    decoded_episode,
    memory_secrets,
)

OPERATIONS = ["episodes", "episode", "search", "export", "report", "prune", "forget", "plans", "plan", "deny",
              "suspend", "resume", "suspension", "reset_flapping", "silence", "unsilence", "silences"]

ARGUMENT_SPEC = dict(
    operation=dict(type="str", required=True, choices=OPERATIONS),
    state_dir=dict(type="path", default="~/.local/state/sentinel-heal"),
    **MEMORY_OPTIONS,
    episode_id=dict(type="int"),
    host=dict(type="str"),
    service=dict(type="str"),
    outcome=dict(type="str", choices=sorted(OUTCOMES)),
    fingerprint=dict(type="str"),
    text=dict(type="str"),
    limit=dict(type="int", default=50),
    dest=dict(type="path"),
    format=dict(type="str", default="episodes", choices=["episodes", "audit"]),
    days=dict(type="float"),
    older_than_days=dict(type="float"),
    plan_id=dict(type="str"),
    status=dict(type="str", default="pending", choices=sorted(PLAN_STATUSES | {"all"})),
    decided_by=dict(type="str"),
    note=dict(type="str", default=""),
    duration=dict(type="str"),
    silence_id=dict(type="int"),
)

DEFAULT_REPORT_DAYS = 7.0

REQUIRED_IF = [
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


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC, required_if=REQUIRED_IF)
        if not 1 <= args["limit"] <= 100_000:
            raise AnsibleActionFail(f"limit: {args['limit']!r} is out of range (1-100000)")
        if args["older_than_days"] is not None and args["older_than_days"] < 0:
            raise AnsibleActionFail(f"older_than_days: {args['older_than_days']!r} must not be negative")
        if args["days"] is not None and not 0 < args["days"] <= 3660:
            raise AnsibleActionFail(f"days: {args['days']!r} is out of range (more than 0, at most 3660)")
        try:
            with Memory.from_options(args) as memory:
                result.update(self._operate(memory, args, task_vars or {}))
        except SentinelError as exc:
            raise AnsibleActionFail(redact(str(exc), memory_secrets(args))) from exc
        return result

    def _operate(self, memory: Memory, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        operation = args["operation"]
        if operation == "episodes":
            rows = memory.episodes(limit=args["limit"], host=args["host"], service=args["service"], outcome=args["outcome"],
                                   fingerprint=args["fingerprint"])
            return {"changed": False, "episodes": [_brief(row) for row in rows]}
        if operation == "episode":
            row = memory.episode(args["episode_id"])
            if row is None:
                raise AnsibleActionFail(f"episode_id: no episode {args['episode_id']} in {memory.where}")
            return {"changed": False, "episode": decoded_episode(row)}
        if operation == "search":
            return {"changed": False, "episodes": [_brief(row) for row in memory.search(args["text"], limit=args["limit"])]}
        if operation == "export" and args["format"] == "audit":
            return self._audit(memory, args)
        if operation == "export":
            return self._export(memory, args)
        if operation == "report":
            return self._report(memory, args)
        if operation in ("prune", "forget"):
            return self._forget(memory, args)
        if operation in ("suspend", "resume", "suspension"):
            return self._kill_switch(memory, args)
        if operation in ("silence", "unsilence", "silences"):
            return self._silences(memory, args, task_vars)
        if operation == "reset_flapping":
            if not self._task.check_mode:
                memory.reset_flapping(args["host"], args["service"], by=args["decided_by"], at=time.time())
            return {"changed": True}
        return self._plans(memory, args)

    def _silences(self, memory: Memory, args: dict[str, Any], task_vars: dict[str, Any]) -> dict[str, Any]:
        operation, now = args["operation"], time.time()
        if operation == "silences":
            return {"changed": False, "silences": [silence.to_dict() for silence in memory.silences(at=now)]}
        if operation == "unsilence":
            if self._task.check_mode:
                return {"changed": bool(memory.silences(at=now)), "silences": []}
            lifted = memory.unsilence(by=args["decided_by"], at=now, silence_id=args["silence_id"], hosts=args["host"], service=args["service"])
            return {"changed": bool(lifted), "silences": [silence.to_dict() for silence in lifted]}
        for name in ("decided_by", "note"):
            if not args[name].strip():
                raise AnsibleActionFail(f"{name}: say {'who silences' if name == 'decided_by' else 'why'} (every job it holds back shows it)")
        until = now + silence_seconds(args["duration"])
        warnings = []
        inventory = set((task_vars.get("groups") or {}).get("all") or ()) | set(task_vars.get("groups") or {})
        if inventory and not any(fnmatch.fnmatchcase(name, args["host"]) for name in inventory):
            warnings.append(f"host: {args['host']!r} matches no host or group of this inventory; the silence is kept anyway")
        if self._task.check_mode:
            return {"changed": True, "silences": [], "warnings": warnings}
        silence = memory.silence(hosts=args["host"], service=args["service"] or ALL_SERVICES, until=until, reason=args["note"],
                                 by=args["decided_by"], at=now)
        return {"changed": True, "silences": [silence.to_dict()], "msg": f"{args['host']} {silence.service}: {silence.describe()}",
                "warnings": warnings}

    def _kill_switch(self, memory: Memory, args: dict[str, Any]) -> dict[str, Any]:
        operation, in_force = args["operation"], memory.suspension()
        if operation == "suspension":
            return {"changed": False, "suspended": in_force is not None, "suspension": in_force.to_dict() if in_force else None}
        if not args["decided_by"].strip():
            raise AnsibleActionFail(f"decided_by: name who {operation}s healing (it is recorded with the switch)")
        if operation == "suspend":
            if not args["note"].strip():
                raise AnsibleActionFail("note: say why healing is suspended (every job that stops shows it)")
            if in_force is not None or self._task.check_mode:
                return {"changed": in_force is None, "suspended": True, "suspension": in_force.to_dict() if in_force else None}
            thrown, _new = memory.suspend(by=args["decided_by"], reason=args["note"], at=time.time())
            return {"changed": True, "suspended": True, "suspension": thrown.to_dict()}
        if in_force is None or self._task.check_mode:
            return {"changed": in_force is not None, "suspended": in_force is not None, "suspension": in_force.to_dict() if in_force else None}
        ended = memory.resume(by=args["decided_by"], at=time.time())
        return {"changed": ended is not None, "suspended": False, "suspension": ended.to_dict() if ended else None}

    def _export(self, memory: Memory, args: dict[str, Any]) -> dict[str, Any]:
        rows = memory.episodes(limit=args["limit"], host=args["host"], service=args["service"], outcome=args["outcome"],
                               fingerprint=args["fingerprint"])
        episodes = [decoded_episode(row) for row in rows]
        if not args["dest"]:
            return {"changed": False, "episodes": episodes}
        if self._task.check_mode:
            return {"changed": True, "dest": args["dest"], "count": len(episodes)}
        dest = Path(args["dest"])
        # Written completely or not at all: a temporary file renamed over the destination.
        with tempfile.NamedTemporaryFile("w", dir=dest.parent, prefix=f".{dest.name}.", delete=False, encoding="utf-8") as handle:
            json.dump({"exported_at": time.time(), "memory": memory.where, "episodes": episodes}, handle, indent=1, sort_keys=True)
        os.replace(handle.name, dest)
        return {"changed": True, "dest": str(dest), "count": len(episodes)}

    def _audit(self, memory: Memory, args: dict[str, Any]) -> dict[str, Any]:
        """The audit trail of the window (the last ``days``; everything without it) as JSON Lines (report/audit.py)."""
        since, until = _window(args["days"])
        episodes = memory.episodes_between(since, until)
        if not args["dest"]:
            return {"changed": False, "records": [record for episode in episodes for record in audit_records(episode)]}
        if self._task.check_mode:
            return {"changed": True, "dest": args["dest"], "count": sum(len(audit_records(episode)) for episode in episodes)}
        return {"changed": True, "dest": args["dest"], "count": write_audit(episodes, args["dest"]), "episode_count": len(episodes)}

    def _report(self, memory: Memory, args: dict[str, Any]) -> dict[str, Any]:
        """The history of the window (the last ``days``, 7 by default) as one self-contained HTML page (report/history.py)."""
        since, until = _window(args["days"] or DEFAULT_REPORT_DAYS)
        episodes = memory.episodes_between(since, until)
        title = f"sentinel.heal history {utc(since)} to {utc(until)}"
        if self._task.check_mode:
            return {"changed": True, "dest": args["dest"], "episode_count": len(episodes)}
        dest = Path(args["dest"])
        # Written completely or not at all: a temporary file renamed over the destination.
        with tempfile.NamedTemporaryFile("w", dir=dest.parent, prefix=f".{dest.name}.", delete=False, encoding="utf-8") as handle:
            handle.write(history_html(episodes, since=since, until=until, title=title))
        os.replace(handle.name, dest)
        return {"changed": True, "dest": str(dest), "episode_count": len(episodes), "incident_count": len({e["incident_id"] for e in episodes})}

    def _forget(self, memory: Memory, args: dict[str, Any]) -> dict[str, Any]:
        if args["operation"] == "forget":
            if self._task.check_mode:
                return {"changed": True, "msg": "check mode: nothing was forgotten"}
            removed = memory.forget(args["fingerprint"])
            return {"changed": removed > 0, "removed": removed}
        # check mode counts exactly what a prune would remove, and removes nothing
        dry_run = bool(self._task.check_mode)
        before = time.time() - args["older_than_days"] * 86400
        keep = memory.artifacts_kept_by_prune(before=before)
        removed = memory.prune(before=before, dry_run=dry_run)
        runs_removed = remove_runs(Path(args["state_dir"]) / "runs", before=before, keep=keep, dry_run=dry_run)
        return {"changed": removed + runs_removed > 0, "removed": removed, "runs_removed": runs_removed}

    def _plans(self, memory: Memory, args: dict[str, Any]) -> dict[str, Any]:
        operation = args["operation"]
        if operation == "plans":
            rows = memory.plans(status=None if args["status"] == "all" else args["status"])
            return {"changed": False, "plans": [approvals.StoredPlan.from_row(row).summary() for row in rows]}
        stored = approvals.load(memory, args["plan_id"])
        if operation == "plan":
            return {"changed": False, "plan": stored.summary()}
        if self._task.check_mode:
            return {"changed": stored.status == "pending", "plan": stored.summary()}
        if not memory.deny_plan(stored.plan_id, by=args["decided_by"], at=time.time(), note=args["note"]):
            raise AnsibleActionFail(f"plan {stored.plan_id} is {stored.status}, not pending: it cannot be denied")
        return {"changed": True, "plan": approvals.load(memory, stored.plan_id).summary()}


def _window(days: float | None) -> tuple[float, float]:
    """[since, until) of the last ``days`` up to now; from the beginning when None."""
    until = time.time()
    return (0.0 if days is None else until - days * 86400), until


def _brief(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("id", "incident_id", "attempt", "host", "service", "fingerprint", "failure_class", "error_text", "plan_source",
            "plan_reference", "outcome", "verified", "approved_by", "started_at", "finished_at")
    return {key: row[key] for key in keys}
