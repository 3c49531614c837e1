"""What the memory needs of a database (``backends.py`` opens one: the SQLite file in the state dir, the embedded
default, or a PostgreSQL server, ``memory_url``, for a cluster of controllers or AWX execution nodes).

:class:`~.memory.Memory` holds the logic once and writes its SQL once, with ``?`` parameters and what both databases
accept (``INSERT ... RETURNING id``, ``ON CONFLICT ... DO UPDATE``); a backend carries only what differs: how it
connects, serialises writers and keeps its schema version, its parameter style, its full-text search and its JSON
functions, and what to tell an operator about its errors.
"""

from __future__ import annotations

from contextlib import AbstractContextManager
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator, Protocol, Sequence


class Cursor(Protocol):
    """The result of one statement; its rows answer both ``row["column"]`` and ``row[0]``, and ``dict(row)``."""

    @property
    def rowcount(self) -> int: ...

    def fetchone(self) -> Any: ...

    def fetchall(self) -> list[Any]: ...

    def __iter__(self) -> Iterator[Any]: ...


@dataclass(frozen=True)
class TextSearch:
    """How one database ranks episodes whose error reads like some words: ``source`` replaces ``FROM episodes`` (the
    episodes stay named ``episodes``), ``condition`` goes into the WHERE clause and ``order`` ranks the best first;
    ``params`` are the parameters of ``source`` and ``condition``, in that order."""

    source: str
    condition: str
    order: str
    params: tuple[Any, ...]


class Database(Protocol):
    """One open connection to the memory's database."""

    # sqlite or postgresql
    name: str
    # the option that names where the memory is (state_dir or memory_url), and where it is (a path, or the URL with its
    # password masked): every error names both
    field: str
    where: str
    # the SQLite file (None on a server)
    path: Path | None
    # the database's numbered, append-only migrations (store/schema.py)
    migrations: tuple[str, ...]
    # the exceptions the database's driver raises
    errors: tuple[type[BaseException], ...]

    @property
    def raw(self) -> Any:
        """The driver's own connection (sqlite3 or psycopg), for tests and benchmarks."""

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Cursor:
        """Run one statement written with ``?`` parameters."""

    def begin(self) -> None:
        """Start a write transaction; writers wait for each other here (up to the busy timeout), one at a time."""

    def commit(self) -> None: ...

    def rollback(self) -> None: ...

    @property
    def in_transaction(self) -> bool: ...

    def schema_version(self) -> int:
        """The number of migrations applied (0: a new database)."""

    def set_schema_version(self, version: int) -> None:
        """Inside a write transaction: record that ``version`` migrations are applied."""

    def setting_up(self) -> AbstractContextManager[None]:
        """Held while the memory is created or migrated, for what the write transaction does not cover."""

    def text_search(self, words: Sequence[str], service: str | None = None) -> TextSearch:
        """Episodes whose abstracted error (or service) holds any of the words, of one service if given."""

    def json_items(self, column: str, key: str) -> str:
        """A FROM item with one row per element (column ``value``) of the JSON array under ``key`` in ``column``."""

    def explain(self, exc: BaseException) -> str:
        """What an operator does about an error of this database."""

    def redact(self, exc: BaseException) -> str:
        """An error's text, never with a password in it."""

    def close(self) -> None: ...
