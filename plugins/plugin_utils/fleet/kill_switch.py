"""The kill switch: a person suspends autonomous remediation for every job, fork and AWX node that shares the memory,
and resumes it. Kept in the suspensions table; a running job polls it every second."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Any

from ansible_collections.sentinel.heal.plugins.module_utils._text import moment
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.database import Database
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.transactions import Transaction


@dataclass(frozen=True)
class Suspension:
    """The kill switch, thrown: who suspended autonomous remediation, when and why (and who resumed it, once resumed)."""

    suspended_at: float
    suspended_by: str
    reason: str
    resumed_at: float | None = None
    resumed_by: str | None = None

    def describe(self) -> str:
        return f"suspended by {self.suspended_by} at {moment(self.suspended_at)}: {self.reason}"

    def to_dict(self) -> dict[str, Any]:
        return dataclasses.asdict(self)


class KillSwitch:
    """The suspensions table over the Database port."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def suspension(self) -> Suspension | None:
        """The suspension in force (the kill switch), or None: read afresh on every call, so a running job sees it thrown."""
        return _suspension(self._db.execute(_SUSPENSION_IN_FORCE).fetchone())

    def suspended_because(self) -> str | None:
        """What the kill switch in force says (who, when, why), or None: what the heal loop polls."""
        suspension = self.suspension()
        return None if suspension is None else suspension.describe()

    def suspend(self, *, by: str, reason: str, at: float) -> tuple[Suspension, bool]:
        """Throw the kill switch; (the suspension in force, whether this call threw it). A second suspend keeps the first."""
        with Transaction(self._db) as db:
            in_force = _suspension(db.execute(_SUSPENSION_IN_FORCE).fetchone())
            if in_force is not None:
                return in_force, False
            db.execute("INSERT INTO suspensions (suspended_at, suspended_by, reason) VALUES (?, ?, ?)", (at, by, reason))
        return Suspension(suspended_at=at, suspended_by=by, reason=reason), True

    def resume(self, *, by: str, at: float) -> Suspension | None:
        """Release the kill switch; the suspension it ends, or None when none was in force."""
        with Transaction(self._db) as db:
            in_force = _suspension(db.execute(_SUSPENSION_IN_FORCE).fetchone())
            if in_force is None:
                return None
            db.execute("UPDATE suspensions SET resumed_at = ?, resumed_by = ? WHERE resumed_at IS NULL", (at, by))
        return dataclasses.replace(in_force, resumed_at=at, resumed_by=by)


_SUSPENSION_IN_FORCE = """SELECT suspended_at, suspended_by, reason, resumed_at, resumed_by FROM suspensions
    WHERE resumed_at IS NULL ORDER BY id DESC LIMIT 1"""


def _suspension(row: Any) -> Suspension | None:
    return None if row is None else Suspension(**dict(row))
