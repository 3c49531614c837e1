"""The SQLite backend: the memory as one file in the state dir (``memory.sqlite3``), the embedded default.

Many processes share it on one machine (the forks of a play, concurrent jobs): WAL mode, ``BEGIN IMMEDIATE`` so that
writers take the file's write lock up front (waiting up to the busy timeout), and a lock file around creating and
migrating it. That locking is only safe on a local filesystem: a state dir on NFS, CIFS/SMB or another network
filesystem is refused before SQLite opens anything (store/filesystems.py).
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import getpass
import shutil
import sqlite3
from pathlib import Path
from typing import Any, Iterator, Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import MemoryStoreError
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.database import TextSearch
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.filesystems import network_filesystem
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.schema import MIGRATIONS

MEMORY_FILE = "memory.sqlite3"


class SQLiteDatabase:
    """The memory file of a state dir, opened (and its directory made) for this process."""

    name = "sqlite"
    field = "state_dir"
    migrations = MIGRATIONS
    errors: tuple[type[BaseException], ...] = (sqlite3.Error, OSError)

    def __init__(self, state_dir: str | Path, *, read_only: bool, busy_timeout_s: float) -> None:
        self.file = Path(state_dir).expanduser() / MEMORY_FILE
        self.path: Path | None = self.file
        self.where = str(self.file)
        self.busy_timeout_s = busy_timeout_s
        refuse_network_filesystem(self.file.parent)
        try:
            if read_only:
                self._conn = sqlite3.connect(f"file:{self.file}?mode=ro", uri=True, timeout=busy_timeout_s, isolation_level=None)
            else:
                self.file.parent.mkdir(parents=True, exist_ok=True, mode=0o700)
                self._conn = sqlite3.connect(self.file, timeout=busy_timeout_s, isolation_level=None)
            self._conn.row_factory = sqlite3.Row
            self._conn.execute(f"PRAGMA busy_timeout = {int(busy_timeout_s * 1000)}")
            if not read_only:
                self._conn.execute("PRAGMA foreign_keys = ON")
        except self.errors as exc:
            raise MemoryStoreError(f"cannot open the memory database ({exc})", field=self.field, value=self.where,
                                   hint=self.explain(exc)) from exc

    @property
    def raw(self) -> sqlite3.Connection:
        return self._conn

    def execute(self, sql: str, params: Sequence[Any] = ()) -> sqlite3.Cursor:
        return self._conn.execute(sql, params)

    def begin(self) -> None:
        self._conn.execute("BEGIN IMMEDIATE")

    def commit(self) -> None:
        self._conn.execute("COMMIT")

    def rollback(self) -> None:
        self._conn.execute("ROLLBACK")

    @property
    def in_transaction(self) -> bool:
        return self._conn.in_transaction

    def schema_version(self) -> int:
        return int(self._conn.execute("PRAGMA user_version").fetchone()[0])

    def set_schema_version(self, version: int) -> None:
        self._conn.execute(f"PRAGMA user_version = {int(version)}")

    @contextlib.contextmanager
    def setting_up(self) -> Iterator[None]:
        # Switching to WAL and migrating take locks SQLite's busy timeout does not wait for when several forks open a
        # new memory at once: one process at a time does it.
        with open(self.file.with_name(MEMORY_FILE + ".lock"), "a") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            self._conn.execute("PRAGMA journal_mode = WAL")
            yield

    def text_search(self, words: Sequence[str], service: str | None = None) -> TextSearch:
        """FTS5 over the service and the abstracted error, ranked by bm25."""
        any_word = " OR ".join(f'"{_fts_quote(word)}"' for word in words)
        query = f'service : "{_fts_quote(service)}" AND ({any_word})' if service is not None else any_word
        return TextSearch(source="episodes_fts JOIN episodes ON episodes.id = episodes_fts.rowid", condition="episodes_fts MATCH ?",
                          order="episodes_fts.rank", params=(query,))

    def json_items(self, column: str, key: str) -> str:
        return f"json_each({column}, '$.{key}')"

    def explain(self, exc: BaseException) -> str:
        return explain(exc, self.file, self.busy_timeout_s)

    def redact(self, exc: BaseException) -> str:
        return str(exc)

    def close(self) -> None:
        self._conn.close()


def refuse_network_filesystem(directory: Path) -> None:
    """Refuse a state dir on a network filesystem (or one that would be made on one), naming the filesystem and what to
    do instead."""
    mount = network_filesystem(directory)
    if mount is None:
        return
    raise MemoryStoreError(
        f"the state dir is on a network filesystem ({mount.fstype}: {mount.source} on {mount.mount_point}), where SQLite's file "
        "locking is unsafe: jobs on two machines (or two jobs on one) could corrupt the memory or lose what the other wrote",
        field="state_dir", value=str(directory),
        hint="keep the memory of several controllers or AWX nodes on PostgreSQL (autoheal_memory_url, the memory_url option: "
             "postgresql://USER@HOST:PORT/DATABASE), or point autoheal_state_dir (state_dir) at a local disk",
    )


def explain(exc: BaseException, path: Path, busy_timeout_s: float) -> str:
    """What an operator does about a database or filesystem error of the memory at ``path``."""
    text = str(exc).lower()
    code = getattr(exc, "errno", None)
    where = path.parent
    if "locked" in text or "busy" in text:
        return (f"another process held the memory's write lock for more than {busy_timeout_s:g} s: find it (fuser {path}), let it "
                "finish or stop it, then run again")
    if code == errno.EROFS or "readonly" in text or "read-only" in text:
        return (f"{where} is read-only here: remount it read-write or make it writable by {getpass.getuser()}, or point "
                "autoheal_state_dir (state_dir) at a writable directory")
    if code in (errno.ENOSPC, errno.EDQUOT) or "full" in text or "disk i/o" in text:
        try:
            free = f"{shutil.disk_usage(where).free // 1024} KiB free"
        except OSError:
            free = "free space unknown"
        return (f"the filesystem of {where} is full or failing ({free}): free space on it (or check it for I/O errors), or point "
                "autoheal_state_dir (state_dir) at another filesystem")
    if code in (errno.EACCES, errno.EPERM) or "unable to open" in text:
        return f"{getpass.getuser()} cannot create or open {path}: give it {where}, or point autoheal_state_dir (state_dir) elsewhere"
    return f"check {path} (sqlite3 {path} 'PRAGMA integrity_check') and the filesystem under it"


def _fts_quote(word: str) -> str:
    return word.replace('"', '""')
