"""A service's paths and their filesystems (module_utils/_host/filesystem.py): owners, disk and inodes, mount points."""

from __future__ import annotations

import grp
import os
import pwd
from pathlib import Path

import pytest
from probe_checks import check, declared

from ansible_collections.sentinel.heal.plugins.module_utils._host import filesystem as _filesystem
from ansible_collections.sentinel.heal.plugins.module_utils._host.filesystem import FULL_PERCENT, MAX_PATHS, disk_usage, mount_points


def test_declared_paths_that_are_missing_or_not_the_users_are_named(tmp_path: Path) -> None:
    data, runtime = tmp_path / "data", tmp_path / "run"
    data.mkdir(mode=0o750)
    me, my_group = pwd.getpwuid(os.getuid()).pw_name, grp.getgrgid(os.getgid()).gr_name
    result = check(
        declared(name="mine", process="definitely-not-running", user=me, paths=[str(data)]),
        declared(name="theirs", process="definitely-not-running", user="svc-account-xyz", paths=[str(data), str(runtime)]),
    )
    failures = {f["name"]: f for f in result["failures"]}
    assert failures["mine"]["evidence"]["paths"] == [
        {"path": str(data), "exists": True, "type": "directory", "owner": me, "group": my_group, "mode": "0750"},
    ]
    assert "owned by" not in failures["mine"]["summary"] and "does not exist" not in failures["mine"]["summary"]
    theirs = failures["theirs"]
    assert f"{data} is owned by {me}:{my_group}, not svc-account-xyz" in theirs["summary"]
    assert f"{runtime} does not exist" in theirs["summary"]
    assert theirs["evidence"]["paths"][1] == {"path": str(runtime), "exists": False}
    # the filesystem of the existing path is measured; the missing one is skipped
    assert [usage["path"] for usage in theirs["evidence"]["disk"]] == [str(data)]


def test_disk_usage_of_a_real_filesystem_is_counted_like_df(tmp_path: Path) -> None:
    usage = disk_usage(str(tmp_path))
    assert usage is not None and usage["path"] == str(tmp_path)
    assert 0 <= usage["used_percent"] <= 100 and usage["free_kb"] <= usage["size_kb"]
    assert usage["full"] is (usage["used_percent"] >= FULL_PERCENT or usage["free_kb"] == 0)
    assert disk_usage(str(tmp_path / "absent")) is None


def _statvfs(blocks: int, bfree: int, bavail: int, files: int, ffree: int) -> os.statvfs_result:
    return os.statvfs_result((4096, 4096, blocks, bfree, bavail, files, ffree, ffree, 0, 255))


@pytest.mark.parametrize(("fs", "full", "exhausted"), [
    (_statvfs(1024, 512, 512, 100, 50), False, False),
    (_statvfs(1024, 0, 0, 100, 50), True, False),
    (_statvfs(1024, 40, 0, 100, 50), True, False),            # only root's reserve is left: full for the service
    (_statvfs(100_000, 900, 900, 100, 50), True, False),      # 99% used
    (_statvfs(1024, 512, 512, 13, 0), False, True),
    (_statvfs(1024, 0, 0, 13, 0), True, True),
    (_statvfs(0, 0, 0, 0, 0), False, False),                   # no limits (procfs-like): never full
])
def test_full_filesystems_and_exhausted_inodes_are_flagged(monkeypatch: pytest.MonkeyPatch, fs: os.statvfs_result, full: bool,
                                                           exhausted: bool) -> None:
    monkeypatch.setattr(_filesystem.os, "statvfs", lambda path: fs)
    usage = disk_usage("/var/log/svc")
    assert usage is not None and (usage["full"], usage["inodes_exhausted"]) == (full, exhausted)


def test_a_full_log_filesystem_is_in_the_summary(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    log = tmp_path / "logs" / "svc.log"
    log.parent.mkdir()
    log.write_text("hello\n")
    monkeypatch.setattr(_filesystem.os, "statvfs", lambda path: _statvfs(1024, 0, 0, 13, 0))
    failure = check(declared(name="svc", process="definitely-not-running", logs=[str(log)]))["failures"][0]
    assert f"disk full: {log.parent} (100% used, 0 KiB free)" in failure["summary"]
    assert f"inodes exhausted: {log.parent} (13 of 13 used)" in failure["summary"]
    [usage] = failure["evidence"]["disk"]
    assert usage == {"path": str(log.parent), "size_kb": 4096, "free_kb": 0, "used_percent": 100, "inodes": 13, "inodes_free": 0,
                     "inodes_percent": 100, "full": True, "inodes_exhausted": True}


def test_path_and_disk_evidence_is_bounded(tmp_path: Path) -> None:
    paths = [str(tmp_path / f"d{n}") for n in range(12)]
    logs = [str(tmp_path / f"l{n}" / "x.log") for n in range(12)]
    failure = check(declared(name="svc", process="definitely-not-running", paths=paths, logs=logs))["failures"][0]
    assert len(failure["evidence"]["paths"]) == MAX_PATHS
    assert failure["evidence"]["disk"] == []  # none of them exists


def test_the_owner_of_each_directory_on_the_way_to_a_declared_path_is_reported_without_following_links(tmp_path: Path) -> None:
    data = tmp_path / "data"
    (data / "main").mkdir(parents=True)
    os.chown(data, pwd.getpwnam("nobody").pw_uid, -1)
    (data / "link").symlink_to("/etc")
    spec = declared(name="svc", process="definitely-not-running", paths=[str(data / "main"), str(data / "link" / "shadow")])
    owners = check(spec)["failures"][0]["evidence"]["path_owners"]
    assert owners[str(tmp_path)] == "root" and owners[str(data)] == "nobody" and owners[str(data / "main")] == "root"
    # a link is reported as one, and nothing is walked below it (/etc/shadow is not looked at through it)
    assert owners[str(data / "link")] == "(link)" and str(data / "link" / "shadow") not in owners


def test_the_mount_points_but_the_kernels_own_are_reported() -> None:
    mounts = mount_points()
    assert mounts is not None and "/" in mounts
    assert not [mount for mount in mounts if mount.split("/")[1] in ("proc", "sys", "dev")]
