"""Write transactions over the Database port: what the memory's episodes and plans, and the fleet's tables (fleet/),
write in."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import MemoryStoreError
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.database import Database


class Transaction:
    """A write transaction (SQLite's BEGIN IMMEDIATE; PostgreSQL's BEGIN and the memory's writer lock) ... COMMIT, or
    ROLLBACK on any error: all of an episode or none of it.

    A database error becomes a MemoryStoreError that names the memory (its file, or its URL with the password masked)
    and what to do."""

    def __init__(self, db: Database) -> None:
        self._db = db

    def __enter__(self) -> Database:
        try:
            self._db.begin()
        except self._db.errors as exc:
            self._rollback()
            raise MemoryStoreError(f"cannot write to the memory ({self._db.redact(exc)}); nothing was written", field=self._db.field,
                                   value=self._db.where, hint=self._db.explain(exc)) from exc
        return self._db

    def __exit__(self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: object) -> None:
        if exc_type is None:
            try:
                self._db.commit()
                return
            except self._db.errors as commit_error:
                exc = commit_error
        self._rollback()
        if isinstance(exc, self._db.errors):
            raise MemoryStoreError(f"the memory refused a write ({self._db.redact(exc)}); nothing of it was kept", field=self._db.field,
                                   value=self._db.where, hint=self._db.explain(exc)) from exc

    def _rollback(self) -> None:
        """Undo what the transaction wrote; on a connection that is gone there is nothing left to undo."""
        gone: tuple[type[BaseException], ...] = (*self._db.errors, MemoryStoreError)
        try:
            if self._db.in_transaction:
                self._db.rollback()
        except gone:
            pass
