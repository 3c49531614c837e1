"""Where a test keeps its memory: the SQLite file in a state dir, or a PostgreSQL database of the test server.

The memory and approval tests take the ``memory_place`` fixture (tests/conftest.py), which runs each of them once per
backend: the same test, the same assertions. A PostgreSQL place is a schema of its own in the test server's database
(``search_path`` in the URL), dropped afterwards, so tests never see each other's memory.
"""

from __future__ import annotations

import sqlite3
import uuid
from dataclasses import dataclass, field, replace
from pathlib import Path
from typing import Any, Sequence

from postgres_server import PostgresServer

from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import MEMORY_FILE, Memory

BACKENDS = ("sqlite", "postgresql")
_OPENED: list[Memory] = []


@dataclass(frozen=True)
class MemoryPlace:
    backend: str
    state_dir: Path
    url: str | None = None
    password: str | None = None
    server: PostgresServer | None = field(default=None, repr=False)
    schema: str | None = None

    def open(self, **options: Any) -> Memory:
        """The memory, opened (closed after the test if the test does not)."""
        memory = Memory(self.state_dir, url=self.url, password=self.password, **options)
        _OPENED.append(memory)
        return memory

    def options(self) -> dict[str, Any]:
        """The options of an action that opens this memory."""
        return {"state_dir": str(self.state_dir), "memory_url": self.url or "", "memory_password": self.password}

    def vars(self) -> dict[str, Any]:
        """The role's (and the playbooks') variables for this memory."""
        return {"autoheal_state_dir": str(self.state_dir), "autoheal_memory_url": self.url or "",
                **({"autoheal_memory_password": self.password} if self.password else {})}

    @property
    def where(self) -> str:
        """How errors name the memory: its file, or its URL (no password in it here)."""
        return str(self.state_dir / MEMORY_FILE) if self.url is None else self.url

    def node(self, name: str) -> MemoryPlace:
        """The same memory seen from another controller: a state dir of its own, the same database (for SQLite, the
        same file: one machine)."""
        if self.url is None:
            return self
        directory = self.state_dir.parent / name
        directory.mkdir(exist_ok=True)
        return replace(self, state_dir=directory)

    def sql(self, statement: str, params: Sequence[Any] = ()) -> list[tuple[Any, ...]]:
        """Run one statement outside sentinel.heal (``?`` parameters), committed: to look into or tamper with the database."""
        if self.url is None:
            conn = sqlite3.connect(self.state_dir / MEMORY_FILE)
            try:
                rows = [tuple(row) for row in conn.execute(statement, tuple(params)).fetchall()]
                conn.commit()
                return rows
            finally:
                conn.close()
        import psycopg

        with psycopg.connect(self.url, password=self.password, autocommit=True) as conn:
            cursor = conn.execute(statement.replace("%", "%%").replace("?", "%s"), tuple(params))
            return [tuple(row) for row in cursor.fetchall()] if cursor.description else []


def sqlite_place(state_dir: Path) -> MemoryPlace:
    return MemoryPlace(backend="sqlite", state_dir=state_dir)


def postgres_place(server: PostgresServer, state_dir: Path) -> MemoryPlace:
    """A fresh, empty memory: a schema of its own in the server's database."""
    import psycopg

    schema = f"t_{uuid.uuid4().hex[:16]}"
    with psycopg.connect(server.url, password=server.password, autocommit=True) as conn:
        conn.execute(f"CREATE SCHEMA {schema}")
    return MemoryPlace(backend="postgresql", state_dir=state_dir, url=f"{server.url}?options=-csearch_path%3D{schema}",
                       password=server.password, server=server, schema=schema)


def close_opened() -> None:
    """Close what tests opened and left open."""
    while _OPENED:
        _OPENED.pop().close()


def drop(place: MemoryPlace) -> None:
    close_opened()
    if place.server is None or place.schema is None:
        return
    import psycopg

    with psycopg.connect(place.server.url, password=place.server.password, autocommit=True) as conn:
        conn.execute(f"DROP SCHEMA {place.schema} CASCADE")
