"""The state dir's footing, checked before anything needs it: a file, a path that cannot be made, one nobody may write,
a memory file that is no database, each refused with its path and what to do; a sound one costs no database open."""

from __future__ import annotations

import json
import os
import sqlite3
import tempfile
from pathlib import Path

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import MemoryStoreError
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.footing import check_state_dir
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory

NOBODY = 65534


def _refused(state_dir: Path, *, sqlite: bool = True, writes: bool = True) -> str:
    with pytest.raises(MemoryStoreError) as refused:
        check_state_dir(state_dir, sqlite=sqlite, writes=writes)
    return str(refused.value)


def test_a_state_dir_that_is_a_file_is_refused_naming_it_and_the_move_that_fits(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.write_text("notes\n")
    for sqlite in (True, False):  # the runs are kept there with PostgreSQL's memory too
        said = _refused(state, sqlite=sqlite)
        assert said == (f"the state dir is a regular file, not a directory; field: state_dir; value: '{state}'; fix: point "
                        f"autoheal_state_dir (the state_dir option) at a directory, or move {state} away (mv {state} {state}.bak): "
                        "the next run makes the directory there")
    assert "integrity_check" not in said and state.read_text() == "notes\n"


def test_a_state_dir_under_a_file_cannot_be_made_and_the_file_is_named(tmp_path: Path) -> None:
    blocker = tmp_path / "sentinel"
    blocker.write_text("")
    said = _refused(blocker / "state" / "deeper")
    assert said.startswith(f"the state dir cannot be made: {blocker} is a regular file, not a directory; field: state_dir; "
                           f"value: '{blocker / 'state' / 'deeper'}'; fix: point autoheal_state_dir (the state_dir option) at a directory, "
                           f"or move {blocker} away")


def test_a_state_dir_that_is_a_dangling_link_says_where_it_points(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.symlink_to(tmp_path / "gone")
    assert _refused(state).startswith(f"the state dir is a symbolic link to {tmp_path / 'gone'} (which does not exist), not a directory")


def _checked_as_nobody(state_dir: Path) -> str:
    """What check_state_dir says to a user who may not write there (root may write anywhere: the check runs in a child
    that became nobody)."""
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:
        try:
            os.setgid(NOBODY)
            os.setuid(NOBODY)
            check_state_dir(state_dir, sqlite=True, writes=True)
            said = "passed"
        except MemoryStoreError as exc:
            said = str(exc)
        finally:
            os.write(write, json.dumps(said).encode())
            os._exit(0)
    os.close(write)
    os.waitpid(pid, 0)
    with os.fdopen(read) as answer:
        return str(json.loads(answer.read()))


@pytest.mark.skipif(os.geteuid() != 0, reason="becomes nobody to be refused where root may write")
def test_a_state_dir_its_user_may_not_write_is_refused_and_one_that_cannot_be_made_there_too() -> None:
    # not tmp_path: pytest keeps it in a directory only root may enter
    with tempfile.TemporaryDirectory() as top:
        state = Path(top) / "state"
        state.mkdir(mode=0o755)
        os.chmod(top, 0o755)
        said = _checked_as_nobody(state)
        assert said.startswith("the state dir is not writable by "), said
        assert f"field: state_dir; value: '{state}'; fix: give " in said and f"{state}), or point autoheal_state_dir" in said
        said = _checked_as_nobody(state / "new")
        assert said.startswith(f"the state dir cannot be made: {state} is not writable by "), said
        os.chmod(state, 0o777)
        assert _checked_as_nobody(state / "new") == "passed" and not (state / "new").exists()


@pytest.mark.parametrize("content", [b"not a database, a note someone left", b"SQLite format 2\x00" + b"\x00" * 84])
def test_a_memory_file_that_is_no_sqlite_database_is_refused_with_what_moving_it_aside_loses(tmp_path: Path, content: bytes) -> None:
    (tmp_path / "memory.sqlite3").write_bytes(content)
    for writes in (True, False):
        said = _refused(tmp_path, writes=writes)
        assert said.startswith(f"the memory file is not a SQLite database (it begins {content[:8]!r}): it is corrupt, or another "
                               f"program wrote it; field: state_dir; value: '{tmp_path / 'memory.sqlite3'}'; fix: move it aside (mv "
                               f"{tmp_path / 'memory.sqlite3'} {tmp_path / 'memory.sqlite3'}.corrupt) and the next run starts a new memory")
    check_state_dir(tmp_path, sqlite=False, writes=True)  # with PostgreSQL's memory, the file is nobody's


def test_a_memory_file_that_is_a_directory_is_refused(tmp_path: Path) -> None:
    (tmp_path / "memory.sqlite3").mkdir()
    assert _refused(tmp_path).startswith("the memory file is a directory, not a SQLite database; field: state_dir")


def test_a_sound_state_dir_passes_and_nothing_is_made_or_opened(tmp_path: Path) -> None:
    check_state_dir(tmp_path / "not" / "made" / "yet", sqlite=True, writes=True)
    assert list(tmp_path.iterdir()) == []
    check_state_dir(tmp_path, sqlite=True, writes=True)
    assert list(tmp_path.iterdir()) == []
    Memory(tmp_path).close()
    (tmp_path / "empty").mkdir()
    (tmp_path / "empty" / "memory.sqlite3").write_bytes(b"")  # SQLite's own new database
    for state_dir in (tmp_path, tmp_path / "empty"):
        check_state_dir(state_dir, sqlite=True, writes=True)
    assert sqlite3.connect(tmp_path / "memory.sqlite3").execute("PRAGMA user_version").fetchone()[0] > 0
