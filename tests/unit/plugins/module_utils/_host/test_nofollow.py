"""The target-side file steps against a real filesystem, with symbolic links planted where a service account could.

One file of about 440 lines, as _host/nofollow.py is one room: each step (chown, chmod, install -d, rm, a file
replaced or read) against the same planted links and the same service and outside trees.
"""

from __future__ import annotations

import ctypes
import os
import stat
import subprocess
import threading
import time
from pathlib import Path
from typing import Any, Callable

import pytest

from ansible_collections.sentinel.heal.plugins.module_utils._host.nofollow import (
    HARD_LINK_REFUSED,
    LINK_REFUSED,
    MAX_DEPTH,
    REPLACED_REFUSED,
    NoFollowRefused,
    change_mode,
    change_owner,
    make_directory,
    open_file,
    read_file,
    remove_file,
    replace_file,
)

NOBODY = 65534
AT_FDCWD, RENAME_EXCHANGE = -100, 2
RACE_SECONDS = 2.0
needs_root = pytest.mark.skipif(os.geteuid() != 0, reason="changing owners needs root")


@pytest.fixture
def service(tmp_path: Path) -> Path:
    """A service's tree its account owns, as /var/lib/redis is redis's."""
    tree = tmp_path / "srv"
    (tree / "data").mkdir(parents=True)
    (tree / "data" / "dump.rdb").write_bytes(b"service data")
    for path in (tree, tree / "data", tree / "data" / "dump.rdb"):
        os.chown(path, NOBODY, NOBODY)
    return tree


@pytest.fixture
def outside(tmp_path: Path) -> Path:
    """Root's files outside the service's tree, where a planted link leads (an /etc)."""
    root = tmp_path / "etc"
    (root / "conf.d").mkdir(parents=True)
    (root / "shadow").write_bytes(b"root's secrets")
    os.chmod(root / "shadow", 0o640)
    os.chmod(root / "conf.d", 0o750)
    return root


def _snapshot(root: Path) -> dict[str, tuple[int, int, int, bytes | None]]:
    """Owner, group, mode and contents of everything under ``root``, links themselves."""
    found = {}
    for path in [root, *root.rglob("*")]:
        info = os.lstat(path)
        found[str(path)] = (info.st_uid, info.st_gid, info.st_mode, path.read_bytes() if stat.S_ISREG(info.st_mode) else None)
    return found


def _owner(path: Path) -> tuple[int, int]:
    info = os.lstat(path)
    return info.st_uid, info.st_gid


def _mode(path: Path) -> int:
    return stat.S_IMODE(os.lstat(path).st_mode)


STEPS: dict[str, Callable[[str], Any]] = {
    "chown -h": lambda path: change_owner(path, NOBODY, NOBODY),
    "chown -R": lambda path: change_owner(path, NOBODY, NOBODY, recursive=True),
    "chmod": lambda path: change_mode(path, 0o777),
    "install -d": lambda path: make_directory(path, NOBODY, NOBODY, 0o777),
    "rm -f": remove_file,
    "replace": lambda path: replace_file(path, b"planted"),
    "read": lambda path: read_file(path, 1024),
}
# what each step is aimed at below the planted link: what the link's target holds, or (install -d) a new directory
AIMED_AT = {"chown -h": "shadow", "chown -R": "conf.d", "chmod": "conf.d", "install -d": "new", "rm -f": "shadow", "replace": "shadow",
            "read": "shadow"}


@needs_root
@pytest.mark.parametrize("step", STEPS)
@pytest.mark.parametrize("depth", [1, 2])
def test_a_link_planted_on_the_way_is_refused_and_what_it_leads_to_is_untouched(step: str, depth: int, service: Path, outside: Path) -> None:
    planted = service / "data" if depth == 1 else service / "data" / "cache"
    if depth == 1:
        os.rename(planted, service / "data.moved")
    planted.symlink_to(outside)
    before = _snapshot(outside)
    path = str(planted / AIMED_AT[step])

    with pytest.raises(NoFollowRefused) as refused:
        STEPS[step](path)

    assert (refused.value.path, refused.value.component, refused.value.reason) == (path, str(planted), LINK_REFUSED)
    assert str(refused.value) == f"{path!r}: {str(planted)!r} is a symbolic link: refused to follow it"
    assert _snapshot(outside) == before
    assert os.readlink(planted) == str(outside)


@needs_root
def test_chown_changes_a_link_itself_never_what_it_leads_to(service: Path, outside: Path) -> None:
    link = service / "data" / "dump.rdb.link"
    link.symlink_to(outside / "shadow")
    before = _snapshot(outside)

    assert change_owner(str(link), NOBODY, NOBODY) == dict(changed=1, unchanged=0, skipped=[])

    assert _owner(link) == (NOBODY, NOBODY)
    assert _snapshot(outside) == before
    # a link to a directory is not a directory to walk either
    tree_link = service / "conf.link"
    tree_link.symlink_to(outside / "conf.d")
    assert change_owner(str(tree_link), NOBODY, -1, recursive=True) == dict(changed=1, unchanged=0, skipped=[])
    assert _owner(tree_link) == (NOBODY, 0)
    assert _snapshot(outside) == before


@needs_root
def test_chown_sets_the_owner_and_keeps_the_group_for_minus_one(service: Path) -> None:
    dump = service / "data" / "dump.rdb"

    assert change_owner(str(dump), 0, -1) == dict(changed=1, unchanged=0, skipped=[])
    assert _owner(dump) == (0, NOBODY)
    assert change_owner(str(dump), 0, -1) == dict(changed=0, unchanged=1, skipped=[])
    assert change_owner(str(service / "data"), -1, 0) == dict(changed=1, unchanged=0, skipped=[])
    assert _owner(service / "data") == (NOBODY, 0)
    assert _owner(dump) == (0, NOBODY)  # not recursive


@needs_root
def test_chmod_and_install_d_refuse_a_link_as_the_last_component(service: Path, outside: Path) -> None:
    link = service / "conf"
    link.symlink_to(outside / "conf.d")
    before = _snapshot(outside)

    for step in (lambda: change_mode(str(link), 0o777), lambda: make_directory(str(link), NOBODY, NOBODY, 0o777)):
        with pytest.raises(NoFollowRefused) as refused:
            step()
        assert (refused.value.component, refused.value.reason) == (str(link), LINK_REFUSED)
        assert str(refused.value) == f"{str(link)!r} is a symbolic link: refused to follow it"

    assert _snapshot(outside) == before
    assert _owner(link) == (0, 0)


@needs_root
def test_chown_r_changes_the_tree_and_its_links_without_following_them(service: Path, outside: Path) -> None:
    data = service / "data"
    (data / "aof" / "deep").mkdir(parents=True)
    (data / "aof" / "deep" / "part.aof").write_bytes(b"log")
    (data / "aof" / "to-etc").symlink_to(outside)
    (data / "to-shadow").symlink_to(outside / "shadow")
    (data / "dangling").symlink_to(service / "nowhere")
    before = _snapshot(outside)
    entries = [data, *data.rglob("*")]
    assert len(entries) == 8

    tally = change_owner(str(data), 1234, 4321, recursive=True)

    assert tally == dict(changed=8, unchanged=0, skipped=[])
    assert {str(path): _owner(path) for path in entries} == {str(path): (1234, 4321) for path in entries}
    assert _snapshot(outside) == before
    assert _owner(service) == (NOBODY, NOBODY)  # the top's parent is not the tree
    # a second run finds everything right and changes nothing; -1 keeps the group
    assert change_owner(str(data), 1234, 4321, recursive=True) == dict(changed=0, unchanged=8, skipped=[])
    assert change_owner(str(data), NOBODY, -1, recursive=True) == dict(changed=8, unchanged=0, skipped=[])
    assert {_owner(path) for path in entries} == {(NOBODY, 4321)}


@needs_root
def test_chown_r_leaves_an_entry_already_right_alone(service: Path) -> None:
    """A chown clears a program's set-user-ID bit even when root makes it: an entry with the owner asked for is not
    chowned again."""
    program = service / "data" / "helper"
    program.write_bytes(b"#!/bin/sh\n")
    os.chown(program, NOBODY, NOBODY)
    os.chmod(program, 0o4755)
    other = service / "data" / "other"
    other.write_bytes(b"#!/bin/sh\n")
    os.chmod(other, 0o4755)

    assert change_owner(str(service), NOBODY, NOBODY, recursive=True) == dict(changed=1, unchanged=4, skipped=[])

    assert _mode(program) == 0o4755
    assert _owner(other) == (NOBODY, NOBODY) and _mode(other) == 0o755  # the kernel cleared it where the owner changed


@needs_root
def test_chown_r_does_not_enter_another_filesystem(service: Path) -> None:
    mount_point = service / "data" / "tmpfs"
    mount_point.mkdir()
    os.chown(mount_point, 0, 0)
    mounted = subprocess.run(["mount", "-t", "tmpfs", "-o", "size=1m,mode=0755", "tmpfs", str(mount_point)], capture_output=True, check=False)
    if mounted.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here: {mounted.stderr.decode(errors='replace').strip()}")
    try:
        (mount_point / "inside").write_bytes(b"another filesystem")
        (service / "data" / "after").write_bytes(b"")

        tally = change_owner(str(service), 1234, 1234, recursive=True)

        assert tally == dict(changed=4, unchanged=0, skipped=[str(mount_point)])
        assert _owner(mount_point) == (0, 0) and _owner(mount_point / "inside") == (0, 0)
        assert {_owner(path) for path in (service, service / "data", service / "data" / "dump.rdb", service / "data" / "after")} == {(1234, 1234)}
    finally:
        subprocess.run(["umount", str(mount_point)], check=True)
    assert _owner(mount_point) == (0, 0)  # the directory below the mount was not changed either


@needs_root
def test_chown_r_refuses_a_tree_nested_deeper_than_it_walks(service: Path) -> None:
    deepest = service.joinpath(*["d"] * (MAX_DEPTH + 1))
    deepest.mkdir(parents=True)

    with pytest.raises(NoFollowRefused) as refused:
        change_owner(str(service), 1234, 1234, recursive=True)

    assert (refused.value.component, refused.value.reason) == (str(deepest), f"is more than {MAX_DEPTH} directories deep: refused")
    # like chown -R stopped by an error: what was reached before is changed, what is below is not
    assert _owner(deepest.parent) == (1234, 1234) and _owner(deepest) == (0, 0)
    assert change_owner(str(deepest.parent), 1234, 1234, recursive=True) == dict(changed=1, unchanged=1, skipped=[])


@needs_root
def test_install_d_makes_the_directories_on_the_way_root_0755_and_the_last_exact(tmp_path: Path) -> None:
    # a set-group-ID parent would hand its group and bit down to what is made in it
    os.chown(tmp_path, 0, NOBODY)
    os.chmod(tmp_path, 0o2775)
    target = tmp_path / "lib" / "redis" / "run"
    umask = os.umask(0o077)
    try:
        result = make_directory(str(target), NOBODY, 1234, 0o2750)
    finally:
        os.umask(umask)

    assert result == dict(created=[str(tmp_path / "lib"), str(tmp_path / "lib" / "redis"), str(target)], changed=True)
    for made in (tmp_path / "lib", tmp_path / "lib" / "redis"):
        assert (_owner(made), _mode(made)) == ((0, 0), 0o755)
    assert (_owner(target), _mode(target)) == ((NOBODY, 1234), 0o2750)
    assert make_directory(str(target), NOBODY, 1234, 0o2750) == dict(created=[], changed=False)


@needs_root
def test_install_d_fixes_an_existing_directory_and_refuses_anything_else(service: Path, outside: Path) -> None:
    data = service / "data"
    os.chmod(data, 0o777)

    assert make_directory(str(data), 0, 0, 0o750) == dict(created=[], changed=True)
    assert (_owner(data), _mode(data)) == ((0, 0), 0o750)
    assert _owner(data / "dump.rdb") == (NOBODY, NOBODY)

    with pytest.raises(NoFollowRefused) as refused:
        make_directory(str(data / "dump.rdb"), 0, 0, 0o750)
    assert str(refused.value) == f"{str(data / 'dump.rdb')!r} is not a directory: refused"
    assert _owner(data / "dump.rdb") == (NOBODY, NOBODY) and (data / "dump.rdb").read_bytes() == b"service data"


@needs_root
def test_chmod_sets_a_directory_s_mode_and_refuses_anything_else(service: Path) -> None:
    data = service / "data"

    assert change_mode(str(data), 0o2750) is True
    assert _mode(data) == 0o2750
    assert change_mode(str(data), 0o2750) is False
    with pytest.raises(NoFollowRefused) as refused:
        change_mode(str(data / "dump.rdb"), 0o777)
    assert refused.value.reason == "is not a directory: refused"
    assert _mode(data / "dump.rdb") != 0o777


def test_rm_removes_a_file_or_a_link_itself_and_refuses_a_directory(tmp_path: Path) -> None:
    run = tmp_path / "run"
    run.mkdir()
    (run / "redis.pid").write_text("4242\n")
    (tmp_path / "shadow").write_text("secrets")
    (run / "redis.sock").symlink_to(tmp_path / "shadow")

    assert remove_file(str(run / "redis.pid")) is True
    assert remove_file(str(run / "redis.sock")) is True
    assert sorted(os.listdir(run)) == [] and (tmp_path / "shadow").read_text() == "secrets"
    assert remove_file(str(run / "redis.pid")) is False  # already gone: what was asked for
    with pytest.raises(NoFollowRefused) as refused:
        remove_file(str(run))
    assert str(refused.value) == f"{str(run)!r} cannot be removed: Is a directory"
    with pytest.raises(NoFollowRefused) as refused:
        remove_file(str(tmp_path / "gone" / "redis.pid"))
    assert str(refused.value) == f"{str(tmp_path / 'gone' / 'redis.pid')!r}: {str(tmp_path / 'gone')!r} does not exist"
    assert run.is_dir()


@pytest.mark.parametrize("step", STEPS)
def test_a_path_not_absolute_and_normal_is_refused(step: str, tmp_path: Path) -> None:
    made = tmp_path / "made"
    for path, reason in [
        ("var/lib/redis", "is not an absolute path: refused"),
        ("", "is not an absolute path: refused"),
        ("/", "is the root directory: refused (a step acts on an entry of a directory)"),
        (f"{made}/../etc", "is not a normal path (an empty, . or .. component, a trailing / or a NUL byte): refused"),
        (f"{made}/./etc", "is not a normal path (an empty, . or .. component, a trailing / or a NUL byte): refused"),
        (f"{made}//etc", "is not a normal path (an empty, . or .. component, a trailing / or a NUL byte): refused"),
        (f"{made}/etc/", "is not a normal path (an empty, . or .. component, a trailing / or a NUL byte): refused"),
        (f"{made}/e\0tc", "is not a normal path (an empty, . or .. component, a trailing / or a NUL byte): refused"),
    ]:
        with pytest.raises(NoFollowRefused) as refused:
            STEPS[step](path)
        assert (refused.value.path, refused.value.component, refused.value.reason) == (path, path, reason)
        assert str(refused.value) == f"{path!r} {reason}"
    assert not made.exists() and os.listdir(tmp_path) == []


def _exchange(first: Path, second: Path) -> None:
    """Swap two names in one step (renameat2 RENAME_EXCHANGE), as an account racing the executor would: at no moment
    is either name missing."""
    libc = ctypes.CDLL(None, use_errno=True)
    if libc.renameat2(AT_FDCWD, os.fsencode(first), AT_FDCWD, os.fsencode(second), RENAME_EXCHANGE) != 0:
        code = ctypes.get_errno()
        raise OSError(code, os.strerror(code), str(first))


@needs_root
def test_a_link_swapped_in_while_steps_run_never_redirects_them(service: Path, outside: Path) -> None:
    """Another thread keeps exchanging the service's directory with a link to root's files while the steps run: each
    acts inside the service's tree (in the directory it opened, wherever its name has gone since) or is refused, and
    what the link leads to is never changed. A stress test: a step that followed a name again after its walk would be
    caught here most of the time, not every time (the walks above catch a link that stays)."""
    data, link = service / "data", service / "data.link"
    (data / "shadow").write_bytes(b"the service's own")
    (data / "conf.d").mkdir()
    (data / "conf.d" / "redis.conf").write_bytes(b"the service's own")
    (outside / "conf.d" / "redis.conf").write_bytes(b"root's too")
    (outside / "gshadow").write_bytes(b"root's too")
    link.symlink_to(outside)
    try:
        _exchange(data, link)
        _exchange(data, link)
    except (OSError, AttributeError) as exc:
        pytest.skip(f"no renameat2 RENAME_EXCHANGE here: {exc}")
    before = _snapshot(outside)
    stop = threading.Event()

    def swap() -> None:
        while not stop.is_set():
            _exchange(data, link)

    # every aim is below the link too (root's files); owners and modes alternate, so that each step has work to do
    steps: list[Callable[[int], Any]] = [
        lambda turn: change_owner(str(data / "shadow"), (NOBODY, 1234)[turn], -1),
        lambda turn: change_owner(str(data / "conf.d"), (NOBODY, 1234)[turn], -1, recursive=True),
        lambda turn: change_mode(str(data / "conf.d"), (0o777, 0o770)[turn]),
        lambda turn: make_directory(str(data / "conf.d"), (NOBODY, 1234)[turn], 0, (0o777, 0o770)[turn]),
        lambda turn: remove_file(str(data / "gshadow")),
    ]
    seen: dict[str, int] = {}
    swapper = threading.Thread(target=swap)
    swapper.start()
    try:
        deadline, turn = time.monotonic() + RACE_SECONDS, 0
        while time.monotonic() < deadline:
            turn = 1 - turn
            for step in steps:
                try:
                    step(turn)
                    outcome = "done"
                except NoFollowRefused as refused:
                    outcome = refused.reason
                seen[outcome] = seen.get(outcome, 0) + 1
    finally:
        stop.set()
        swapper.join()
        if data.is_symlink():
            _exchange(data, link)

    assert _snapshot(outside) == before
    assert set(seen) <= {"done", LINK_REFUSED, REPLACED_REFUSED}, seen
    assert seen.get("done", 0) >= 50 and seen.get(LINK_REFUSED, 0) >= 50, seen


@needs_root
def test_a_file_is_replaced_at_once_with_its_owner_and_mode_and_a_link_in_its_place_is_refused(service: Path, outside: Path) -> None:
    target = service / "data" / "dump.rdb"
    os.chmod(target, 0o640)
    assert read_file(str(target), 1024) == b"service data"
    assert replace_file(str(target), b"good data") == {"uid": NOBODY, "gid": NOBODY, "mode": 0o640}
    assert target.read_bytes() == b"good data" and _owner(target) == (NOBODY, NOBODY) and _mode(target) == 0o640
    assert sorted(path.name for path in target.parent.iterdir()) == ["dump.rdb"]  # nothing left beside it
    with pytest.raises(NoFollowRefused, match="larger than 4 bytes"):
        read_file(str(target), 4)
    target.unlink()
    target.symlink_to(outside / "shadow")
    before = _snapshot(outside)
    for step in (lambda: replace_file(str(target), b"planted"), lambda: read_file(str(target), 1024)):
        with pytest.raises(NoFollowRefused):
            step()
    assert _snapshot(outside) == before


@needs_root
@pytest.mark.parametrize("recursive", [False, True])
def test_a_hard_link_to_a_file_outside_the_service_is_neither_given_an_owner_nor_read(recursive: bool, service: Path, outside: Path) -> None:
    """The service's account makes a second name for /etc/shadow in its own tree (where fs.protected_hardlinks is off,
    or it was given the file once): chown -R of the tree, chown of the name, or a read of it would reach shadow itself."""
    shadow_before = _snapshot(outside)
    os.chown(service / "data" / "dump.rdb", 0, 0)
    second_name = service / "data" / "zz-shadow"
    os.link(outside / "shadow", second_name)
    target = service / "data" if recursive else second_name

    with pytest.raises(NoFollowRefused) as refused:
        change_owner(str(target), NOBODY, NOBODY, recursive=recursive)
    assert (refused.value.component, refused.value.reason) == (str(second_name), HARD_LINK_REFUSED)
    assert _snapshot(outside) == shadow_before and _owner(outside / "shadow") == (0, 0)
    with pytest.raises(NoFollowRefused, match="hard link"), open_file(str(second_name)):
        pass
    with pytest.raises(NoFollowRefused, match="hard link"):
        read_file(str(second_name), 1024)


def test_a_file_read_through_a_link_in_its_place_or_on_its_way_is_refused(service: Path, outside: Path) -> None:
    log = service / "data" / "redis.log"
    log.symlink_to(outside / "shadow")
    with pytest.raises(NoFollowRefused) as refused, open_file(str(log)):
        pass
    assert (refused.value.component, refused.value.reason) == (str(log), LINK_REFUSED)
    with open_file(str(service / "data" / "dump.rdb")) as handle:
        assert handle.read() == b"service data"
