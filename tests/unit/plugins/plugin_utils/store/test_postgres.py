"""The PostgreSQL backend against a real server (the ``postgres`` fixture): what differs from SQLite and only it has -
logging in (the URL, memory_password, PGPASSWORD, ~/.pgpass), errors that say what to do and never show the password,
and a schema that keeps in step with SQLite's. The memory's behaviour itself is tested on both backends by the
``memory_place`` tests (test_memory.py, test_approvals.py, test_cluster.py)."""

from __future__ import annotations

import sqlite3
import threading
import time
from pathlib import Path
from typing import Iterator
from urllib.parse import quote

import psycopg
import pytest
from memory_places import MemoryPlace, drop, postgres_place
from postgres_server import PostgresServer, free_port

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import MemoryStoreError
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import MEMORY_FILE, Memory, memory_secrets
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.postgres import mask_url, url_password
from helpers import nginx_failure


@pytest.fixture
def pg_place(postgres: PostgresServer, tmp_path: Path) -> Iterator[MemoryPlace]:
    """A fresh memory on the test server (a schema of its own)."""
    (tmp_path / "state").mkdir()
    place = postgres_place(postgres, tmp_path / "state")
    yield place
    drop(place)


@pytest.mark.parametrize(("url", "masked"), [
    ("postgresql://sentinel:s3cret@db.example.com:5432/heal", "postgresql://sentinel:********@db.example.com:5432/heal"),
    ("postgres://sentinel:p@ss:w/rd@db:5432/heal?sslmode=require", "postgres://sentinel:********@db:5432/heal?sslmode=require"),
    ("postgresql://sentinel@db/heal?password=s3cret&sslmode=verify-full", "postgresql://sentinel@db/heal?password=********&sslmode=verify-full"),
    ("postgresql://sentinel@db:5432/heal", "postgresql://sentinel@db:5432/heal"),
    ("postgresql:///heal?host=/run/postgresql", "postgresql:///heal?host=/run/postgresql"),
    ("mysql://root:hunter2@db/heal", "mysql://root:********@db/heal"),
])
def test_a_url_is_shown_with_its_password_masked(url: str, masked: str) -> None:
    assert mask_url(url) == masked


def test_the_password_of_a_url_is_a_secret_to_redact_as_written_and_decoded() -> None:
    assert url_password("postgresql://u:p%40ss@h/d") == "p@ss"
    assert url_password("postgresql://u@h/d?password=x%2Fy") == "x/y"
    assert url_password("postgresql://u@h/d") is None
    assert memory_secrets({"memory_url": "postgresql://u:one@h/d", "memory_password": "two"}) == ["two", "one"]
    assert memory_secrets({"memory_url": "", "memory_password": None}) == []


def _refused(url: str, password: str | None = None) -> MemoryStoreError:
    with pytest.raises(MemoryStoreError) as refused:
        Memory("/nonexistent-state-dir", url=url, password=password, busy_timeout_s=5)
    assert refused.value.field == "memory_url"
    return refused.value


def test_a_wrong_password_is_refused_naming_the_url_masked_and_where_the_password_comes_from(postgres: PostgresServer) -> None:
    wrong = f"postgresql://sentinel:not-{postgres.password}@127.0.0.1:{postgres.port}/sentinel_heal"
    error = _refused(wrong)
    message = str(error)
    assert error.value == f"postgresql://sentinel:********@127.0.0.1:{postgres.port}/sentinel_heal"
    assert 'password authentication failed for user "sentinel"' in message
    assert "the server refused the login of sentinel" in message and "memory_password" in message and "PGPASSWORD" in message
    assert f"not-{postgres.password}" not in message and postgres.password not in message
    error = _refused(postgres.url, password="wrong-too")  # the option's password is never shown either
    assert "wrong-too" not in str(error) and "the server refused the login of sentinel" in str(error)


def test_a_missing_password_says_where_to_give_it(postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "none"))
    message = str(_refused(postgres.url))
    assert "no password supplied" in message and "memory_password (autoheal_memory_password, no_log), in PGPASSWORD" in message


def test_a_missing_database_says_how_to_create_it(postgres: PostgresServer) -> None:
    message = str(_refused(f"postgresql://sentinel@127.0.0.1:{postgres.port}/no_such_db", password=postgres.password))
    assert 'database "no_such_db" does not exist' in message
    assert f"createdb -h 127.0.0.1 -p {postgres.port} -O sentinel no_such_db" in message


def test_a_server_that_does_not_answer_says_so(tmp_path: Path) -> None:
    port = free_port()  # nothing listens there
    message = str(_refused(f"postgresql://sentinel:topsecret@127.0.0.1:{port}/sentinel_heal"))
    assert "Connection refused" in message and "topsecret" not in message
    assert f"no PostgreSQL server answers at 127.0.0.1:{port}: start it" in message and f"pg_isready -h 127.0.0.1 -p {port}" in message


@pytest.mark.parametrize("url", ["mysql://root:hunter2@db/heal", "sqlite:///var/lib/heal.db", "db.example.com:5432"])
def test_what_is_not_a_postgresql_url_is_refused_before_connecting(url: str) -> None:
    error = _refused(url)
    assert error.message == "not a PostgreSQL URL" and "hunter2" not in str(error)
    assert "postgresql://USER@HOST:PORT/DATABASE" in str(error) and "leave it empty for the SQLite memory" in str(error)


def test_the_password_comes_from_the_url_the_option_pgpassword_or_pgpass(
        postgres: PostgresServer, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    monkeypatch.delenv("PGPASSWORD", raising=False)
    monkeypatch.setenv("PGPASSFILE", str(tmp_path / "none"))
    host = f"127.0.0.1:{postgres.port}/sentinel_heal"
    opened = [Memory(tmp_path, url=f"postgresql://sentinel:{quote(postgres.password, safe='')}@{host}"),
              Memory(tmp_path, url=f"postgresql://sentinel:wrong@{host}", password=postgres.password)]  # the option wins
    monkeypatch.setenv("PGPASSWORD", postgres.password)  # what an AWX credential injects
    opened.append(Memory(tmp_path, url=postgres.url))
    monkeypatch.delenv("PGPASSWORD")
    pgpass = tmp_path / "pgpass"
    pgpass.write_text(f"127.0.0.1:{postgres.port}:sentinel_heal:sentinel:{postgres.password}\n")
    pgpass.chmod(0o600)
    monkeypatch.setenv("PGPASSFILE", str(pgpass))
    opened.append(Memory(tmp_path, url=postgres.url))
    for memory in opened:
        assert memory.backend == "postgresql" and memory.path is None and memory.where == mask_url(memory.where) != ""
        memory.close()
    assert not (tmp_path / MEMORY_FILE).exists()


def _columns_sqlite(path: Path) -> dict[str, dict[str, str]]:
    conn = sqlite3.connect(path)
    tables = [row[0] for row in conn.execute("SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'episodes_fts%'")]
    found = {table: {row[1]: row[2].upper() for row in conn.execute(f"PRAGMA table_info({table})")} for table in tables}
    conn.close()
    return found


_SAME_TYPE = {"INTEGER": {"integer", "bigint"}, "TEXT": {"text"}, "REAL": {"double precision"}}


def test_both_backends_have_the_same_tables_and_columns_and_times_keep_every_digit(pg_place: MemoryPlace, tmp_path: Path) -> None:
    memory_place = pg_place
    Memory(tmp_path).close()
    sqlite_columns = _columns_sqlite(tmp_path / MEMORY_FILE)
    with memory_place.open():
        rows = memory_place.sql("""SELECT table_name, column_name, data_type FROM information_schema.columns
                                   WHERE table_schema = current_schema() AND table_name <> 'memory_schema_version'""")
    postgres_columns: dict[str, dict[str, str]] = {}
    for table, column, data_type in rows:
        postgres_columns.setdefault(table, {})[column] = data_type
    assert set(postgres_columns) == set(sqlite_columns)
    for table, columns in sqlite_columns.items():
        assert list(postgres_columns[table]) and set(postgres_columns[table]) == set(columns), table
        for column, kind in columns.items():
            assert postgres_columns[table][column] in _SAME_TYPE[kind], (table, column, kind, postgres_columns[table][column])
    # a time is a double on both (never PostgreSQL's 4-byte real): the microseconds survive
    stamp = 1_732_000_000.123456
    with memory_place.open() as memory:
        attempt = Attempt(number=1, outcome="failed", started_at=stamp, finished_at=stamp + 0.000001)
        memory.record_attempt(incident_id="t", failure=nginx_failure(), attempt=attempt)
        [episode] = memory.episodes()
    assert (episode["started_at"], episode["finished_at"]) == (stamp, stamp + 0.000001)


def test_the_similar_error_search_uses_its_index(pg_place: MemoryPlace) -> None:
    with pg_place.open() as memory:
        search = memory._db.text_search(["bind", "address"])
        memory._db.execute("SET enable_seqscan = off")  # as on a memory of many episodes
        plan = memory._db.execute(f"EXPLAIN SELECT episodes.id FROM {search.source} WHERE {search.condition} ORDER BY {search.order}",
                                  search.params).fetchall()
    assert "episodes_search" in "\n".join(row[0] for row in plan)


def test_a_write_waits_for_another_nodes_write_and_then_goes_through(pg_place: MemoryPlace) -> None:
    """The writer lock serialises writers across connections (nodes), as SQLite's BEGIN IMMEDIATE does across processes."""
    memory_place = pg_place
    holder = psycopg.connect(memory_place.url, password=memory_place.password, autocommit=True)
    with memory_place.node("a").open() as memory:
        holder.execute("BEGIN")
        holder.execute("SELECT pg_advisory_xact_lock(hashtext('sentinel.heal memory ' || current_schema()))")
        started = time.monotonic()
        release = threading.Timer(0.5, lambda: holder.execute("COMMIT"))
        release.start()
        memory.record_attempt(incident_id="after", failure=nginx_failure(), attempt=Attempt(number=1, outcome="failed"))
        waited = time.monotonic() - started
        release.join()
        assert waited >= 0.4 and [e["incident_id"] for e in memory.episodes()] == ["after"]
    holder.close()


def test_a_server_that_goes_away_during_a_job_is_a_clear_error_not_a_traceback(pg_place: MemoryPlace) -> None:
    with pg_place.open() as memory:
        memory.record_attempt(incident_id="before", failure=nginx_failure(), attempt=Attempt(number=1, outcome="failed"))
        pg_place.sql("SELECT pg_terminate_backend(pid) FROM pg_stat_activity WHERE application_name = 'sentinel.heal' "
                     "AND datname = current_database() AND pid <> pg_backend_pid()")
        with pytest.raises(MemoryStoreError, match=r"lost the connection to the memory database \(.*terminating connection") as lost:
            memory.episodes()
        assert lost.value.field == "memory_url" and "no PostgreSQL server answers at 127.0.0.1" in str(lost.value)
        with pytest.raises(MemoryStoreError, match="lost the connection to the memory database"):
            memory.record_attempt(incident_id="after", failure=nginx_failure(), attempt=Attempt(number=1, outcome="failed"))
