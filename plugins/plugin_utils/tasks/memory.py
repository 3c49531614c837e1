# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What the memory's modules do to the memory on the controller: the queries (memory_info), the exports (memory_export),
pruning (memory_prune) and a person's decisions (silence, suspension, approval, flapping_reset).

Each operation is one function ``(memory, args, *, check_mode, task_vars) -> the task's result`` over the task's
validated arguments, whichever module runs it: the deprecated ``sentinel.heal.memory`` maps each of its operations onto
the same function (tasks/memory_legacy.py). Check mode changes nothing and says what would change.
"""

from __future__ import annotations

import fnmatch
import json
import os
import tempfile
import time
from pathlib import Path
from typing import Any, Callable, Mapping

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import SentinelError
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.adapter import job_of
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.runner import remove_runs
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import FleetIncidents
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.kill_switch import KillSwitch
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.silences import ALL_SERVICES, Silences, silence_seconds
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard import approvals
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.secrets import known_secrets, redact
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.options import MEMORY_PLACE_SPEC
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.destinations import destinations_from
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.messages import denied_notice
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.sending import tell
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.audit import approval_request_records, audit_records, write_audit
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.history import history_html
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.page import utc
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.approval_requests import ApprovalRequests
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import (
    OUTCOMES,
    PLAN_STATUSES,
    Memory,
    decoded_episode,
    memory_secrets,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.notifying import with_notifications

# (memory, args, *, check_mode, task_vars) -> the task's result
Operation = Callable[..., dict[str, Any]]


# Where the memory is: the first options of every memory module (the sentinel.heal.controller and .memory fragments).
MEMORY_SPEC: dict[str, Any] = MEMORY_PLACE_SPEC
# Which episodes: memory_info's kind episodes and memory_export's format episodes.
EPISODE_FILTERS: dict[str, Any] = dict(
    host=dict(type="str"),
    service=dict(type="str"),
    outcome=dict(type="str", choices=sorted(OUTCOMES)),
    fingerprint=dict(type="str"),
    limit=dict(type="int", default=50),
)
PLAN_STATUS_OPTION: dict[str, Any] = dict(type="str", default="pending", choices=sorted(PLAN_STATUSES | {"all"}))
DECIDED_BY_OPTION: dict[str, Any] = dict(type="str", required=True)

DEFAULT_REPORT_DAYS = 7.0
EPISODE_FILTER_NAMES = ("host", "service", "outcome", "fingerprint")


def perform(operation: Operation, args: Mapping[str, Any], *, check_mode: bool, task_vars: Mapping[str, Any]) -> dict[str, Any]:
    """One operation on the memory the arguments name (``state_dir``, ``memory_url``), its ranges checked first; an
    error of the memory fails the task with the password masked."""
    check_ranges(args)
    return on_memory(operation, args, check_mode=check_mode, task_vars=task_vars)


class MemoryTaskAction(ActionBase):
    """The action plugin of one of the memory's modules: its arguments validated (``argument_spec`` and the
    ``validation`` rules of validate_argument_spec), then its ``task`` on the memory they name."""

    TRANSFERS_FILES = False
    _requires_connection = False
    argument_spec: dict[str, Any] = {}
    validation: dict[str, Any] = {}
    task: Operation

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result: dict[str, Any] = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=self.argument_spec, **self.validation)
        result.update(perform(type(self).task, args, check_mode=bool(self._task.check_mode), task_vars=task_vars or {}))
        return result


def check_ranges(args: Mapping[str, Any]) -> None:
    if args.get("limit") is not None and not 1 <= args["limit"] <= 100_000:
        raise AnsibleActionFail(f"limit: {args['limit']!r} is out of range (1-100000)")
    if args.get("older_than_days") is not None and args["older_than_days"] < 0:
        raise AnsibleActionFail(f"older_than_days: {args['older_than_days']!r} must not be negative")
    if args.get("days") is not None and not 0 < args["days"] <= 3660:
        raise AnsibleActionFail(f"days: {args['days']!r} is out of range (more than 0, at most 3660)")


def on_memory(operation: Operation, args: Mapping[str, Any], *, check_mode: bool, task_vars: Mapping[str, Any]) -> dict[str, Any]:
    try:
        with Memory.from_options(args) as memory:
            return operation(memory, args, check_mode=check_mode, task_vars=task_vars)
    except SentinelError as exc:
        raise AnsibleActionFail(redact(str(exc), memory_secrets(args))) from exc


def _only_with(args: Mapping[str, Any], names: tuple[str, ...], setting: str, value: str, allowed: str) -> None:
    """An option given where it does nothing fails the task rather than being ignored without a word."""
    for name in names:
        if args.get(name) is not None:
            raise AnsibleActionFail(f"{name}: {args[name]!r} applies to {setting} {allowed} only, not to {setting} {value}")


# ---- queries (memory_info) ----

def info(memory: Memory, args: Mapping[str, Any], *, check_mode: bool, task_vars: Mapping[str, Any]) -> dict[str, Any]:
    """What the memory holds, by ``kind``: episodes (one, a full-text search, or filtered), plans (one, or by status),
    the silences in force, the kill switch, the latest fleet incidents. Reads only."""
    kind = args["kind"]
    if kind != "episodes":
        _only_with(args, ("episode_id", "text", *EPISODE_FILTER_NAMES), "kind", kind, "episodes")
    if kind != "plans":
        _only_with(args, ("plan_id",), "kind", kind, "plans")
    if kind == "plans":
        return _plans(memory, args)
    if kind == "silences":
        return {"changed": False, "silences": [silence.to_dict() for silence in Silences(memory.database).silences(at=time.time())]}
    if kind == "fleet_incidents":
        incidents = FleetIncidents(memory.database).fleet_incidents(limit=args["limit"])
        return {"changed": False, "fleet_incidents": [incident.to_dict() for incident in incidents]}
    if kind == "suspension":
        in_force = KillSwitch(memory.database).suspension()
        return {"changed": False, "suspended": in_force is not None, "suspension": in_force.to_dict() if in_force else None}
    if args.get("episode_id") is not None:
        row = memory.episode(args["episode_id"])
        if row is None:
            raise AnsibleActionFail(f"episode_id: no episode {args['episode_id']} in {memory.where}")
        return {"changed": False, "episode": decoded_episode(row)}
    if args.get("text") is not None:
        return {"changed": False, "episodes": [_brief(row) for row in memory.search(args["text"], limit=args["limit"])]}
    return {"changed": False, "episodes": [_brief(row) for row in _episodes(memory, args)]}


def _plans(memory: Memory, args: Mapping[str, Any]) -> dict[str, Any]:
    if args.get("plan_id") is not None:
        return {"changed": False, "plan": approvals.load(memory, args["plan_id"]).summary()}
    rows = memory.plans(status=None if args["status"] == "all" else args["status"])
    return {"changed": False, "plans": [approvals.StoredPlan.from_row(row).summary() for row in rows]}


def _episodes(memory: Memory, args: Mapping[str, Any]) -> list[dict[str, Any]]:
    return memory.episodes(limit=args["limit"], **{name: args.get(name) for name in EPISODE_FILTER_NAMES})


def _brief(row: dict[str, Any]) -> dict[str, Any]:
    keys = ("id", "incident_id", "attempt", "host", "service", "fingerprint", "failure_class", "error_text", "plan_source",
            "plan_reference", "outcome", "verified", "approved_by", "started_at", "finished_at", "relapsed_from", "relapsed_at")
    brief = {key: row[key] for key in keys}
    # how a heal held: relapsed, and how long after (null for any other outcome, or a heal no failure came back after)
    brief["relapsed_after_s"] = round(row["relapsed_at"] - row["finished_at"], 1) if row["relapsed_at"] is not None else None
    return brief


# ---- exports (memory_export) ----

def export(memory: Memory, args: Mapping[str, Any], *, check_mode: bool, task_vars: Mapping[str, Any]) -> dict[str, Any]:
    """The episodes as one JSON document, the audit trail of a window as JSON Lines, or the history of a window as one
    HTML page: written to ``dest`` whole or not at all, or (episodes, audit) returned. Check mode writes nothing."""
    form = args["format"]
    if form == "episodes":
        _only_with(args, ("days",), "format", form, "audit and history")
        return _export_episodes(memory, args, check_mode)
    _only_with(args, EPISODE_FILTER_NAMES, "format", form, "episodes")
    if form == "audit":
        return _export_audit(memory, args, check_mode)
    return _export_history(memory, args, check_mode)


def _export_episodes(memory: Memory, args: Mapping[str, Any], check_mode: bool) -> dict[str, Any]:
    episodes = [decoded_episode(row) for row in _episodes(memory, args)]
    if not args.get("dest"):
        return {"changed": False, "episodes": episodes}
    if check_mode:
        return {"changed": True, "dest": args["dest"], "count": len(episodes)}
    dest = Path(args["dest"])
    _write_whole(dest, json.dumps({"exported_at": time.time(), "memory": memory.where, "episodes": episodes}, indent=1, sort_keys=True))
    return {"changed": True, "dest": str(dest), "count": len(episodes)}


def _export_audit(memory: Memory, args: Mapping[str, Any], check_mode: bool) -> dict[str, Any]:
    """The audit trail of the window (the last ``days``; everything without it) as JSON Lines (report/audit.py)."""
    since, until = _window(args.get("days"))
    episodes = memory.episodes_between(since, until)
    # then what the approval page was asked in the window: each decision it took, each request it refused
    requests = approval_request_records(request.to_dict() for request in ApprovalRequests(memory.database).between(since, until))
    if not args.get("dest"):
        return {"changed": False, "records": [*(record for episode in episodes for record in audit_records(episode)), *requests]}
    if check_mode:
        return {"changed": True, "dest": args["dest"], "count": sum(len(audit_records(episode)) for episode in episodes) + len(requests)}
    return {"changed": True, "dest": args["dest"], "count": write_audit(episodes, args["dest"], requests), "episode_count": len(episodes)}


def _export_history(memory: Memory, args: Mapping[str, Any], check_mode: bool) -> dict[str, Any]:
    """The history of the window (the last ``days``, 7 by default) as one self-contained HTML page (report/history.py)."""
    since, until = _window(args.get("days") or DEFAULT_REPORT_DAYS)
    episodes = memory.episodes_between(since, until)
    title = f"sentinel.heal history {utc(since)} to {utc(until)}"
    if check_mode:
        return {"changed": True, "dest": args["dest"], "episode_count": len(episodes)}
    dest = Path(args["dest"])
    _write_whole(dest, history_html(episodes, since=since, until=until, title=title))
    return {"changed": True, "dest": str(dest), "episode_count": len(episodes), "incident_count": len({e["incident_id"] for e in episodes})}


def _write_whole(dest: Path, text: str) -> None:
    # Written completely or not at all: a temporary file renamed over the destination.
    with tempfile.NamedTemporaryFile("w", dir=dest.parent, prefix=f".{dest.name}.", delete=False, encoding="utf-8") as handle:
        handle.write(text)
    os.replace(handle.name, dest)


def _window(days: float | None) -> tuple[float, float]:
    """[since, until) of the last ``days`` up to now; from the beginning when None."""
    until = time.time()
    return (0.0 if days is None else until - days * 86400), until


# ---- pruning (memory_prune) ----

def prune(memory: Memory, args: Mapping[str, Any], *, check_mode: bool, task_vars: Mapping[str, Any]) -> dict[str, Any]:
    """Forget the episodes that finished more than ``older_than_days`` ago (not those a stored plan refers to) and the
    run directories no remaining episode points to; or every episode and plan of one ``fingerprint``. Check mode counts
    exactly what would go, and removes nothing."""
    if args.get("fingerprint") is not None:
        removed = memory.forget(args["fingerprint"], dry_run=check_mode)
        return {"changed": removed > 0, "removed": removed, **({"msg": "check mode: nothing was forgotten"} if check_mode else {})}
    before = time.time() - args["older_than_days"] * 86400
    keep = memory.artifacts_kept_by_prune(before=before)
    removed = memory.prune(before=before, dry_run=check_mode)
    runs_removed = remove_runs(Path(args["state_dir"]) / "runs", before=before, keep=keep, dry_run=check_mode)
    return {"changed": removed + runs_removed > 0, "removed": removed, "runs_removed": runs_removed}


# ---- a person's decisions (silence, suspension, approval, flapping_reset) ----

def silence(memory: Memory, args: Mapping[str, Any], *, check_mode: bool, task_vars: Mapping[str, Any]) -> dict[str, Any]:
    """``state: present`` says hands off ``host`` (and ``service``) for ``duration``; ``absent`` lifts the silences of
    ``silence_id``, or of ``host`` (and ``service``). Check mode shows the silences it would lift, and sets none."""
    now = time.time()
    if args["state"] == "absent":
        lifted = Silences(memory.database).unsilence(by=args["decided_by"], at=now, silence_id=args.get("silence_id"), hosts=args.get("host"),
                                                     service=args.get("service"), dry_run=check_mode)
        return {"changed": bool(lifted), "silences": [silence.to_dict() for silence in lifted]}
    for name in ("decided_by", "note"):
        if not args[name].strip():
            raise AnsibleActionFail(f"{name}: say {'who silences' if name == 'decided_by' else 'why'} (every job it holds back shows it)")
    until = now + silence_seconds(args["duration"])
    warnings = []
    inventory = set((task_vars.get("groups") or {}).get("all") or ()) | set(task_vars.get("groups") or {})
    if inventory and not any(fnmatch.fnmatchcase(name, args["host"]) for name in inventory):
        warnings.append(f"host: {args['host']!r} matches no host or group of this inventory; the silence is kept anyway")
    if check_mode:
        return {"changed": True, "silences": [], "warnings": warnings}
    silenced = Silences(memory.database).silence(hosts=args["host"], service=args.get("service") or ALL_SERVICES, until=until,
                                                 reason=args["note"], by=args["decided_by"], at=now)
    return {"changed": True, "silences": [silenced.to_dict()], "msg": f"{args['host']} {silenced.service}: {silenced.describe()}",
            "warnings": warnings}


def suspension(memory: Memory, args: Mapping[str, Any], *, check_mode: bool, task_vars: Mapping[str, Any]) -> dict[str, Any]:
    """The kill switch: ``state: present`` throws it (a second throw keeps the first), ``absent`` releases it."""
    verb, in_force = ("suspend" if args["state"] == "present" else "resume"), KillSwitch(memory.database).suspension()
    if not args["decided_by"].strip():
        raise AnsibleActionFail(f"decided_by: name who {verb}s healing (it is recorded with the switch)")
    if verb == "suspend":
        if not args["note"].strip():
            raise AnsibleActionFail("note: say why healing is suspended (every job that stops shows it)")
        if in_force is not None or check_mode:
            return {"changed": in_force is None, "suspended": True, "suspension": in_force.to_dict() if in_force else None}
        thrown, _new = KillSwitch(memory.database).suspend(by=args["decided_by"], reason=args["note"], at=time.time())
        return {"changed": True, "suspended": True, "suspension": thrown.to_dict()}
    if in_force is None or check_mode:
        return {"changed": in_force is not None, "suspended": in_force is not None, "suspension": in_force.to_dict() if in_force else None}
    ended = KillSwitch(memory.database).resume(by=args["decided_by"], at=time.time())
    return {"changed": ended is not None, "suspended": False, "suspension": ended.to_dict() if ended else None}


def deny(memory: Memory, args: Mapping[str, Any], *, check_mode: bool, task_vars: Mapping[str, Any]) -> dict[str, Any]:
    """Refuse a plan that waits for a person, so it can never run (approving one is running it: sentinel.heal.execute),
    and tell the people of ``notify`` who denied it and why - once: a plan is denied once, while it is pending. Check
    mode fails as the denial would, on a plan no longer pending, and tells nobody."""
    destinations = destinations_from(args.get("notify"))
    stored = approvals.load(memory, args["plan_id"])
    refused = f"plan {stored.plan_id} is {stored.status}, not pending: it cannot be denied"
    if stored.status != "pending":
        raise AnsibleActionFail(refused)
    if check_mode:
        return {"changed": True, "plan": stored.summary()}
    if not memory.deny_plan(stored.plan_id, by=args["decided_by"], at=time.time(), note=args["note"]):
        # another person decided it meanwhile
        raise AnsibleActionFail(f"plan {stored.plan_id} is {approvals.load(memory, stored.plan_id).status}, not pending: it cannot be denied")
    notice = denied_notice(stored, by=args["decided_by"], note=args["note"], now=time.time())
    deliveries = tell(destinations, [notice], state_dir=args["state_dir"], job=job_of(task_vars),
                      secrets=known_secrets(task_vars, memory_secrets(args)))
    return with_notifications({"changed": True, "plan": approvals.load(memory, stored.plan_id).summary()}, deliveries,
                              [delivery.describe() for delivery in deliveries if not delivery.delivered])


def reset_flapping(memory: Memory, args: Mapping[str, Any], *, check_mode: bool, task_vars: Mapping[str, Any]) -> dict[str, Any]:
    """The past remediations of ``service`` on ``host`` no longer count against its flapping limit (a reset is recorded
    each time: it always changes the memory)."""
    if not check_mode:
        memory.reset_flapping(args["host"], args["service"], by=args["decided_by"], at=time.time())
    return {"changed": True}
