"""The PostgreSQL backend: the memory of a cluster (several controllers, AWX execution nodes, a sliced job) on one server.

Selected with ``memory_url`` (``postgresql://USER@HOST:PORT/DATABASE``, the role's ``autoheal_memory_url``). The password
comes from ``memory_password`` (``no_log``), else from the URL, else from libpq itself (``PGPASSWORD``, which an AWX
credential can inject, or ``~/.pgpass``); it is never shown: every URL an error names has its password masked.

Writers are serialised as SQLite's ``BEGIN IMMEDIATE`` serialises them: each write transaction first takes one
transaction-scoped advisory lock of the memory (per database and schema), waiting up to the busy timeout
(``lock_timeout``). The schema version is a one-row table; the full-text search over errors is PostgreSQL's own
(``to_tsvector('simple', ...)`` under a GIN index, ranked by ``ts_rank``), as FTS5 with bm25 is on SQLite.
"""

from __future__ import annotations

import contextlib
import functools
import re
from pathlib import Path
from typing import Any, Iterator, Sequence
from urllib.parse import unquote

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import MemoryStoreError
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.database import TextSearch
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.schema import POSTGRES_MIGRATIONS, SEARCH_VECTOR, VERSION_TABLE

SCHEMES = ("postgresql", "postgres")
CONNECT_TIMEOUT_S = 10
APPLICATION_NAME = "sentinel.heal"
MASK = "********"
# the key of the memory's writer lock: one per database and schema
_WRITER_LOCK = "SELECT pg_advisory_xact_lock(hashtext('sentinel.heal memory ' || current_schema()))"
_PASSWORD_PARAMETER = re.compile(r"(?i)([?&]password=)([^&#]*)")


class PostgresDatabase:
    """A connection to the server of ``memory_url`` (autocommit outside the explicit write transactions)."""

    name = "postgresql"
    field = "memory_url"
    migrations = POSTGRES_MIGRATIONS
    path: Path | None = None

    def __init__(self, url: str, *, password: str | None, read_only: bool, busy_timeout_s: float) -> None:
        self.where = mask_url(url)
        self.busy_timeout_s = busy_timeout_s
        self.read_only = read_only
        self._secrets = [secret for secret in (password, url_password(url)) if secret]
        self.target = _target(url, self.where, self._secrets)
        try:
            import psycopg
        except ImportError as exc:
            raise MemoryStoreError("a memory on PostgreSQL needs the psycopg package on the controller, which is not installed",
                                   field=self.field, value=self.where,
                                   hint="pip install 'psycopg[binary]' into the controller's Python (requirements.txt has it; so "
                                        "has an execution environment built with the collection's requirements)") from exc
        self.errors: tuple[type[BaseException], ...] = (psycopg.Error,)
        options: dict[str, Any] = {"autocommit": True, "row_factory": _rows, "application_name": APPLICATION_NAME}
        if "connect_timeout" not in self.target:
            options["connect_timeout"] = CONNECT_TIMEOUT_S
        if password:
            options["password"] = password
        try:
            self._conn: Any = psycopg.connect(url, **options)
            self._conn.execute(f"SET lock_timeout = {max(1, int(busy_timeout_s * 1000))}")
            if read_only:
                self._conn.execute("SET default_transaction_read_only = on")
        except psycopg.Error as exc:
            raise MemoryStoreError(f"cannot open the memory database ({self.redact(exc)})", field=self.field, value=self.where,
                                   hint=self.explain(exc)) from exc

    @property
    def raw(self) -> Any:
        return self._conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> Any:
        try:
            return self._conn.execute(_paramstyle(sql), tuple(params))
        except self.errors as exc:
            if not self._conn.broken:
                raise
            # the server went away (restarted, failed over) in the middle of a job: what to do, not a traceback
            raise MemoryStoreError(f"lost the connection to the memory database ({self.redact(exc)})", field=self.field, value=self.where,
                                   hint=self.explain(exc)) from exc

    def begin(self) -> None:
        self.execute("BEGIN")
        self.execute(_WRITER_LOCK)

    def commit(self) -> None:
        self.execute("COMMIT")

    def rollback(self) -> None:
        self.execute("ROLLBACK")

    @property
    def in_transaction(self) -> bool:
        from psycopg.pq import TransactionStatus

        return bool(self._conn.info.transaction_status != TransactionStatus.IDLE)

    def schema_version(self) -> int:
        # the catalog read as a table (a snapshot of this statement), not by name: a name lookup may answer from this
        # connection's cache, from before another process created the table while this one waited for the writer lock
        exists = self._conn.execute("""SELECT count(*) FROM pg_catalog.pg_class JOIN pg_catalog.pg_namespace ON pg_namespace.oid = relnamespace
                                       WHERE nspname = current_schema() AND relname = %s""", (VERSION_TABLE,)).fetchone()[0]
        if not exists:
            return 0
        row = self._conn.execute(f"SELECT version FROM {VERSION_TABLE}").fetchone()
        return 0 if row is None else int(row[0])

    def set_schema_version(self, version: int) -> None:
        self._conn.execute(f"CREATE TABLE IF NOT EXISTS {VERSION_TABLE} (id INTEGER PRIMARY KEY CHECK (id = 1), version INTEGER NOT NULL)")
        self._conn.execute(f"INSERT INTO {VERSION_TABLE} (id, version) VALUES (1, %s) ON CONFLICT (id) DO UPDATE SET version = excluded.version",
                           (version,))

    @contextlib.contextmanager
    def setting_up(self) -> Iterator[None]:
        yield  # every migration runs in a write transaction, under the writer lock

    def text_search(self, words: Sequence[str], service: str | None = None) -> TextSearch:
        """PostgreSQL's full-text search over the service and the abstracted error (the 'simple' configuration: no
        stemming and no stop words, as FTS5's tokenizer), ranked by ts_rank normalised by the error's length (as bm25
        favours the shorter of two errors that hold the same words)."""
        condition = f"{SEARCH_VECTOR} @@ search_query" + (" AND episodes.service = ?" if service is not None else "")
        return TextSearch(source="episodes CROSS JOIN websearch_to_tsquery('simple', ?) AS search_query", condition=condition,
                          order=f"ts_rank({SEARCH_VECTOR}, search_query, 1) DESC, episodes.id DESC",
                          params=(" or ".join(words), *([service] if service is not None else [])))

    def json_items(self, column: str, key: str) -> str:
        return f"jsonb_array_elements_text(({column})::jsonb -> '{key}') AS {key}_items (value)"

    def explain(self, exc: BaseException) -> str:
        return explain(exc, self.target, self.where, self.busy_timeout_s, self.read_only)

    def redact(self, exc: BaseException | str) -> str:
        """An error's text without the password (a driver may echo what it was given)."""
        text = str(exc)
        for secret in self._secrets:
            text = text.replace(secret, MASK)
        return text

    def close(self) -> None:
        self._conn.close()


def mask_url(url: str) -> str:
    """The URL with its password (in the user part, or a ``password=`` parameter) replaced by asterisks."""
    scheme, sep, rest = url.partition("://")
    if sep:
        authority_end = len(rest.split("?", 1)[0])
        at = rest.rfind("@", 0, authority_end)
        if at >= 0 and ":" in rest[:at]:
            user = rest[:at].split(":", 1)[0]
            rest = f"{user}:{MASK}{rest[at:]}"
        url = f"{scheme}{sep}{rest}"
    return _PASSWORD_PARAMETER.sub(lambda match: match.group(1) + MASK, url)


def url_password(url: str) -> str | None:
    """The password written in the URL, if any (both as written and percent-decoded are secrets)."""
    _scheme, sep, rest = url.partition("://")
    at = rest.rfind("@", 0, len(rest.split("?", 1)[0])) if sep else -1
    found = rest[:at].split(":", 1)[1] if at >= 0 and ":" in rest[:at] else None
    parameter = _PASSWORD_PARAMETER.search(url)
    found = found or (parameter.group(2) if parameter else None)
    return unquote(found) if found else None


def _target(url: str, masked: str, secrets: Sequence[str]) -> dict[str, str]:
    """The connection parameters of the URL (libpq's own parsing), refusing what is not a PostgreSQL URL."""
    scheme = url.partition("://")[0].lower() if "://" in url else ""
    if scheme not in SCHEMES:
        raise MemoryStoreError("not a PostgreSQL URL", field="memory_url", value=masked,
                               hint="postgresql://USER@HOST:PORT/DATABASE (the password apart, in memory_password or PGPASSWORD); "
                                    "leave it empty for the SQLite memory in the state dir")
    try:
        from psycopg.conninfo import conninfo_to_dict
    except ImportError:
        return {}  # the connection itself says psycopg is missing
    try:
        return {key: str(value) for key, value in conninfo_to_dict(url).items() if key != "password"}
    except Exception as exc:  # noqa: BLE001 - psycopg raises ProgrammingError, libpq's text says why
        text = str(exc)
        for secret in [*secrets, url]:
            text = text.replace(secret, MASK)
        raise MemoryStoreError(f"memory_url cannot be read ({text})", field="memory_url", value=masked,
                               hint="postgresql://USER@HOST:PORT/DATABASE, with any special character of the user or database "
                                    "percent-encoded") from None


def explain(exc: BaseException, target: dict[str, str], where: str, busy_timeout_s: float, read_only: bool) -> str:
    """What an operator does about an error of the PostgreSQL memory: the server down, authentication, the database
    missing, rights, the writer lock."""
    text = str(exc).lower()
    state = getattr(exc, "sqlstate", None) or ""
    host, port = target.get("host") or "localhost", target.get("port") or "5432"
    user, database = target.get("user") or "(the controller's user)", target.get("dbname") or target.get("user") or "(the user's name)"
    if state == "55P03" or "lock timeout" in text:
        return (f"another process held the memory's write lock for more than {busy_timeout_s:g} s: find it (SELECT pid, state, query "
                "FROM pg_stat_activity WHERE pid IN (SELECT pid FROM pg_locks WHERE locktype = 'advisory')), let it finish or stop "
                "it, then run again")
    if state in ("28P01", "28000") or "password authentication failed" in text or "no password supplied" in text \
            or "authentication failed" in text:
        return (f"the server refused the login of {user}: give its password in memory_password (autoheal_memory_password, "
                "no_log), in PGPASSWORD (an AWX credential can inject it) or ~/.pgpass, or in the URL; check that the role exists "
                f"with that password and that pg_hba.conf on {host} lets it in from this controller")
    if state == "3D000" or (f'database "{database}" does not exist' in text) or ("database" in text and "does not exist" in text):
        return (f"the database {database} does not exist on {host}:{port}: create it (createdb -h {host} -p {port} -O {user} "
                f"{database}, as a superuser), or fix the database name in memory_url")
    if any(words in text for words in ("connection refused", "could not connect", "timeout expired", "could not translate host name",
                                       "no route to host", "network is unreachable", "server closed the connection",
                                       "is the server running", "terminating connection", "the database system is",
                                       "the connection is closed", "the connection is lost")):
        return (f"no PostgreSQL server answers at {host}:{port}: start it, or fix the host and port in memory_url "
                f"(pg_isready -h {host} -p {port} says whether one answers there)")
    if state == "42501" or "permission denied" in text:
        return (f"{user} may not create or change the memory's tables in {database}: make it the database's owner (ALTER DATABASE "
                f"{database} OWNER TO {user}) or GRANT CREATE, USAGE ON SCHEMA public TO {user}")
    if state == "25006" or "read-only transaction" in text:
        if read_only:
            return "check mode opens the memory read-only: run without --check to write"
        return f"the server at {host}:{port} is read-only (a standby?): point memory_url at the primary"
    if state in ("53100", "53200") or "no space left" in text or "could not extend file" in text:
        return f"the database server {host} is out of disk or memory: free space there, then run again"
    return f"check the server at {host}:{port} and memory_url (psql '{where}' connects with the same settings)"


@functools.lru_cache(maxsize=1024)
def _paramstyle(sql: str) -> str:
    """``?`` parameters as psycopg's ``%s`` (and a literal ``%`` doubled)."""
    return sql.replace("%", "%%").replace("?", "%s")


class Row:
    """A row that answers by column name and by index, and converts to a dict, as sqlite3.Row does."""

    __slots__ = ("_index", "_values")

    def __init__(self, values: Sequence[Any], index: dict[str, int]) -> None:
        self._values = tuple(values)
        self._index = index

    def __getitem__(self, key: int | str) -> Any:
        return self._values[self._index[key] if isinstance(key, str) else key]

    def keys(self) -> list[str]:
        return list(self._index)

    def __iter__(self) -> Iterator[Any]:
        return iter(self._values)

    def __len__(self) -> int:
        return len(self._values)

    def __repr__(self) -> str:
        return f"Row({dict(zip(self._index, self._values, strict=True))!r})"


def _rows(cursor: Any) -> Any:
    """psycopg's row factory for :class:`Row`."""
    index = {column.name: number for number, column in enumerate(cursor.description or ())}

    def make(values: Sequence[Any]) -> Row:
        return Row(values, index)

    return make
