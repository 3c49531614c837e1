"""What is said once, whoever says it: the notices_said table over the memory's Database port (migration 12).

A fleet incident's message is said by the first to get there of every fork, job, controller and AWX execution node
that shares the memory - the slices of one sliced job on two nodes, the job of an event source's fleet event and a
host's own job - since they all meet the fleet incident in that memory. A state dir is one machine's; the memory is
what they share (on one machine, the SQLite file in the state dir: the same place)."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.plugin_utils.store.database import Database
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.transactions import Transaction


class SaidOnce:
    """The notices_said table: one row per thing said, written by whoever said it first."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def first_to_say(self, what: str, *, at: float) -> bool:
        """Whether the caller is the first ever to say ``what`` (``fleet-9-opened``): the row is made at most once,
        whichever writer's insert the database takes first."""
        with Transaction(self._db) as db:
            made = db.execute("INSERT INTO notices_said (what, said_at) VALUES (?, ?) ON CONFLICT (what) DO NOTHING", (what, at))
            return made.rowcount == 1
