"""What the approval page was asked, in the memory beside the plans it is about: every decision it took (one per plan at
most, whatever retries and second clicks arrive) and every request it refused, with why. The audit trail reads them
(report/audit.py), as it reads the episodes."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ansible_collections.sentinel.heal.plugins.plugin_utils.store.database import Database
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.transactions import Transaction

# how a request reached the page: its own form, or a Slack button
VIAS = ("page", "slack")
# why a request was refused
# (unavailable: the memory could not say whether the plan still waits; that record reaches the memory only once it is back)
REFUSALS = ("forged", "expired", "other_plan", "used", "unlisted", "slack_signature", "slack_timestamp", "no_plan", "bad_request", "unavailable")
_COLUMNS = ("at", "via", "plan_id", "host", "decision", "approver", "claimed_by", "outcome", "refusal", "reason", "remote")


@dataclass(frozen=True)
class ApprovalRequest:
    """One request to the page. ``plan_id`` and ``host`` are those of a link whose signature held (empty otherwise);
    ``decision`` is empty for a look at the page; ``approver`` is the listed approver's name (empty when none was
    found), ``claimed_by`` who the request said it came from (a Slack user id: never a person's token)."""

    at: float
    via: str
    outcome: str
    reason: str
    plan_id: str = ""
    host: str = ""
    decision: str = ""
    approver: str = ""
    claimed_by: str = ""
    refusal: str = ""
    remote: str = ""

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class ApprovalRequests:
    """The approval_requests table over the Database port."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def refused(self, request: ApprovalRequest) -> None:
        with Transaction(self._db) as db:
            _insert(db, request)

    def accept(self, request: ApprovalRequest) -> ApprovalRequest | None:
        """Take the decision of ``request`` (outcome accepted) unless one was taken for its plan before: then that one,
        and nothing is written (the caller refuses this request as used)."""
        with Transaction(self._db) as db:
            taken = _decision_of(db, request.plan_id)
            if taken is not None:
                return taken
            _insert(db, request)
        return None

    def decision_of(self, plan_id: str) -> ApprovalRequest | None:
        """The decision the page took for the plan, if it took one."""
        return _decision_of(self._db, plan_id)

    def between(self, since: float, until: float) -> list[ApprovalRequest]:
        rows = self._db.execute(f"SELECT {', '.join(_COLUMNS)} FROM approval_requests WHERE at >= ? AND at < ? ORDER BY at, id", (since, until))
        return [_request(row) for row in rows]


def _insert(db: Database, request: ApprovalRequest) -> None:
    values = request.to_dict()
    db.execute(f"INSERT INTO approval_requests ({', '.join(_COLUMNS)}) VALUES ({', '.join('?' for _column in _COLUMNS)})",
               tuple(values[column] for column in _COLUMNS))


def _decision_of(db: Database, plan_id: str) -> ApprovalRequest | None:
    row = db.execute(f"SELECT {', '.join(_COLUMNS)} FROM approval_requests WHERE plan_id = ? AND outcome = 'accepted'", (plan_id,)).fetchone()
    return None if row is None else _request(row)


def _request(row: Any) -> ApprovalRequest:
    return ApprovalRequest(**{column: row[column] for column in _COLUMNS})
