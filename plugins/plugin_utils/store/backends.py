"""Which database the memory opens: the SQLite file in the state dir (the embedded default) or a PostgreSQL server
(``memory_url``), for a cluster of controllers or AWX execution nodes. Apart from ``database.py`` (what the memory needs
of either), so that the backends import that and nothing imports back."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.sentinel.heal.plugins.plugin_utils.store.database import Database
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.postgres import PostgresDatabase
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.sqlite import SQLiteDatabase


def open_database(state_dir: str | Path, *, url: str | None = None, password: str | None = None, read_only: bool = False,
                  busy_timeout_s: float) -> Database:
    """The PostgreSQL server of ``url`` when one is given, else the SQLite file in ``state_dir``."""
    if url:
        return PostgresDatabase(url, password=password, read_only=read_only, busy_timeout_s=busy_timeout_s)
    return SQLiteDatabase(state_dir, read_only=read_only, busy_timeout_s=busy_timeout_s)
