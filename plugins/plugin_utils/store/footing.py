"""Whether the state dir can hold the memory and the runs, checked at the start of every heal, healthy hosts included:
a state dir that is a file, one that cannot be made or written, one on a network filesystem (SQLite's memory), or a
memory file that is no SQLite database, each said with its path and the one action that fits, before anything needs
it. A few stats and the first bytes of an existing memory file: a healthy host whose state dir is fine opens nothing.
"""

from __future__ import annotations

import getpass
import os
import stat
from pathlib import Path

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import MemoryStoreError
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.sqlite import MEMORY_FILE, refuse_network_filesystem

# how every SQLite database file begins (an empty file is a new database to SQLite)
SQLITE_HEADER = b"SQLite format 3\x00"
# where a person points the state dir elsewhere
STATE_DIR_SETTING = "autoheal_state_dir (the state_dir option)"


def check_state_dir(state_dir: str | Path, *, sqlite: bool, writes: bool) -> None:
    """Raise a MemoryStoreError naming the path and what to do when the state dir cannot serve. ``sqlite``: the memory
    is the SQLite file in it (no memory_url); ``writes``: the task writes there (heal outside check mode)."""
    path = Path(os.path.abspath(Path(state_dir).expanduser()))
    existing = _nearest_existing(path)
    if existing != path and not existing.is_dir():
        raise MemoryStoreError(f"the state dir cannot be made: {existing} is a {_kind(existing)}, not a directory", field="state_dir",
                               value=str(path), hint=f"point {STATE_DIR_SETTING} at a directory, or move {existing} away")
    if existing == path and not path.is_dir():
        raise MemoryStoreError(f"the state dir is a {_kind(path)}, not a directory", field="state_dir", value=str(path),
                               hint=f"point {STATE_DIR_SETTING} at a directory, or move {path} away (mv {path} {path}.bak): "
                                    "the next run makes the directory there")
    if writes and not os.access(existing, os.W_OK | os.X_OK):
        raise _not_writable(path, existing)
    if not sqlite:
        return
    refuse_network_filesystem(path)
    _check_memory_file(path / MEMORY_FILE, writes=writes)


def _check_memory_file(file: Path, *, writes: bool) -> None:
    try:
        with open(file, "rb") as opened:
            if not stat.S_ISREG(os.fstat(opened.fileno()).st_mode):
                raise MemoryStoreError(f"the memory file is a {_kind(file)}, not a SQLite database", field="state_dir", value=str(file),
                                       hint=f"move {file} away: the next run starts a new memory there")
            head = opened.read(len(SQLITE_HEADER))
    except FileNotFoundError:
        return  # a new memory: made when a service first needs it
    except IsADirectoryError:
        raise MemoryStoreError("the memory file is a directory, not a SQLite database", field="state_dir", value=str(file),
                               hint=f"move {file} away: the next run starts a new memory there") from None
    except OSError as exc:
        raise MemoryStoreError(f"the memory file cannot be read ({exc.strerror})", field="state_dir", value=str(file),
                               hint=f"give {getpass.getuser()} {file}, or point {STATE_DIR_SETTING} elsewhere") from None
    if head and head != SQLITE_HEADER:
        raise MemoryStoreError(
            f"the memory file is not a SQLite database (it begins {head[:8]!r}): it is corrupt, or another program wrote it",
            field="state_dir", value=str(file),
            hint=f"move it aside (mv {file} {file}.corrupt) and the next run starts a new memory - the fixes it remembered, the "
                 "plans that failed and the plans waiting for approval are lost - or put back a backup of it")
    if writes and not os.access(file, os.W_OK):
        raise MemoryStoreError(f"the memory file is not writable by {getpass.getuser()}", field="state_dir", value=str(file),
                               hint=f"give {getpass.getuser()} {file} (chown {getpass.getuser()} {file}), or point {STATE_DIR_SETTING} elsewhere")


def _not_writable(path: Path, existing: Path) -> MemoryStoreError:
    user = getpass.getuser()
    made = "" if existing == path else f"cannot be made: {existing} "
    try:
        read_only = bool(os.statvfs(existing).f_flag & os.ST_RDONLY)
    except OSError:
        read_only = False
    if read_only:
        return MemoryStoreError(f"the state dir {made}is on a read-only filesystem", field="state_dir", value=str(path),
                                hint=f"remount {existing}'s filesystem read-write, or point {STATE_DIR_SETTING} at a writable directory")
    return MemoryStoreError(f"the state dir {made}is not writable by {user}", field="state_dir", value=str(path),
                            hint=f"give {user} {existing} (chown {user} {existing}), or point {STATE_DIR_SETTING} at a directory {user} may write")


def _nearest_existing(path: Path) -> Path:
    """The path itself, or its nearest ancestor that exists (a link counts as there, even a dangling one)."""
    candidate = path
    while not os.path.lexists(candidate) and candidate != candidate.parent:
        candidate = candidate.parent
    return candidate


def _kind(path: Path) -> str:
    try:
        mode = path.lstat().st_mode
    except OSError:
        return "path that cannot be read"
    if stat.S_ISLNK(mode):
        return f"symbolic link to {os.readlink(path)}" + ("" if path.exists() else " (which does not exist)")
    if stat.S_ISREG(mode):
        return "regular file"
    if stat.S_ISDIR(mode):
        return "directory"
    return "special file"
