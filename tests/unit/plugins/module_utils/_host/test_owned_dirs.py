"""What a service owns, read from the host: its unit's directories, dpkg-statoverride, and what its directories were
while it was healthy, kept beside its last known good configuration (real directories below the test's host)."""

from __future__ import annotations

import grp
import json
import os
import pwd
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.sentinel.heal.plugins.module_utils._host import known_good as _known_good
from ansible_collections.sentinel.heal.plugins.module_utils._host import logs as _logs
from ansible_collections.sentinel.heal.plugins.module_utils._host import owned_dirs as _owned_dirs
from ansible_collections.sentinel.heal.plugins.module_utils._host import probe as _probe
from ansible_collections.sentinel.heal.plugins.module_utils._host.known_good import OWNED_DIRS
from ansible_collections.sentinel.heal.plugins.module_utils._host.owned_dirs import (
    owned_dirs,
    record_seen,
    seen_while_healthy,
    service_directories,
    statoverride_entries,
    unit_entries,
)

ME = pwd.getpwuid(os.getuid()).pw_name
MY_GROUP = grp.getgrgid(os.getgid()).gr_name
# what `systemctl show` prints of Debian 13's mariadb.service, and of a unit that leaves its group unsaid
MARIADB_UNIT = {"Id": "mariadb.service", "User": "mysql", "Group": "mysql", "DynamicUser": "no", "RuntimeDirectory": "mysqld",
                "RuntimeDirectoryMode": "0755", "StateDirectory": "", "StateDirectoryMode": "0755", "LogsDirectory": "", "CacheDirectory": ""}


def test_the_unit_names_its_directories_with_its_user_group_and_modes() -> None:
    """systemd makes RuntimeDirectory= in /run (anew at each start), StateDirectory=, CacheDirectory= and LogsDirectory=
    in their areas, the account's down the whole tree; each may list several, and the mode is 0755 when unsaid."""
    unit = {"User": ME, "Group": "", "RuntimeDirectory": "app", "RuntimeDirectoryMode": "0750", "StateDirectory": "app app/spool",
            "StateDirectoryMode": "0700", "LogsDirectory": "app", "CacheDirectory": "../etc"}
    assert unit_entries([unit]) == [
        {"path": f"{_owned_dirs.RUN}/app", "owner": ME, "group": MY_GROUP, "mode": "0750", "tree": False, "source": "unit RuntimeDirectory="},
        {"path": f"{_owned_dirs.STATE}/app", "owner": ME, "group": MY_GROUP, "mode": "0700", "tree": True, "source": "unit StateDirectory="},
        {"path": f"{_owned_dirs.STATE}/app/spool", "owner": ME, "group": MY_GROUP, "mode": "0700", "tree": True,
         "source": "unit StateDirectory="},
        {"path": f"{_owned_dirs.LOGS}/app", "owner": ME, "group": MY_GROUP, "mode": "0755", "tree": True, "source": "unit LogsDirectory="},
    ]  # a name that climbs out of its area (../etc) is none systemd makes
    assert [entry["owner"] for entry in unit_entries([{"RuntimeDirectory": "app"}])] == ["root"]  # no User=: root's


@pytest.mark.parametrize("unit", [
    {**MARIADB_UNIT, "DynamicUser": "yes"},  # its account exists only while it runs
    {**MARIADB_UNIT, "User": "no-such-account-of-the-test", "Group": ""},  # no primary group to tell
])
def test_a_unit_whose_account_cannot_be_told_names_no_owner(unit: dict[str, str]) -> None:
    assert unit_entries([unit]) == []


def test_dpkg_statoverride_speaks_only_for_the_services_own_directories(empty_host: Path) -> None:
    data, logs = f"{_owned_dirs.STATE}/db", f"{_owned_dirs.LOGS}/db"
    (empty_host / "var/lib/dpkg/statoverride").write_text("\n".join([
        f"mysql mysql 700 {data}", f"#120 adm 2750 {logs}", "root root 4755 /usr/bin/other", "mysql mysql rwx /somewhere", "torn line"]) + "\n")
    assert statoverride_entries([data, logs]) == [
        {"path": data, "owner": "mysql", "group": "mysql", "mode": "0700", "tree": False, "source": "dpkg-statoverride"},
        {"path": logs, "owner": "120", "group": "adm", "mode": "2750", "tree": False, "source": "dpkg-statoverride"}]
    (empty_host / "var/lib/dpkg/statoverride").unlink()
    assert statoverride_entries([data]) == []


def test_a_services_directories_are_its_declared_ones_its_units_and_those_named_for_it_never_a_shared_one() -> None:
    spec = {"name": "db", "service": "mariadb", "paths": ["/srv/db/data/", "/var/run/db-extra"],
            "logs": [f"{_owned_dirs.LOGS}/syslog", "/srv/db/log/error.log"]}
    assert service_directories(spec, [MARIADB_UNIT]) == [
        "/srv/db/data", f"{_owned_dirs.RUN}/db-extra", "/srv/db/log", f"{_owned_dirs.RUN}/mysqld",
        *(f"{area}/{name}" for name in ("db", "mariadb") for area in (_owned_dirs.STATE, _owned_dirs.LOGS, _owned_dirs.RUN, _owned_dirs.CACHE))]
    many = {"name": "db", "paths": [f"/srv/db/{index}" for index in range(40)]}
    assert len(service_directories(many, [])) == _owned_dirs.MAX_OWNED_DIRS


def test_the_unit_speaks_first_then_dpkg_statoverride_then_what_was_seen_while_healthy(empty_host: Path) -> None:
    runtime, data, logs = f"{_owned_dirs.RUN}/mysqld", f"{_owned_dirs.STATE}/db", f"{_owned_dirs.LOGS}/db"
    (empty_host / "var/lib/dpkg/statoverride").write_text(f"mysql root 755 {runtime}\nmysql mysql 700 {data}\n")
    seen = [dict(path=path, owner="mysql", group="mysql", mode="0755", tree=True, source="seen while healthy at 2026-01-02T03:04:05Z")
            for path in (runtime, data, logs, "/etc/shadow.d")]
    found = {entry["path"]: (entry["owner"], entry["group"], entry["mode"], entry["source"])
             for entry in owned_dirs({"name": "db"}, [MARIADB_UNIT], seen)}
    assert found == {runtime: ("mysql", "mysql", "0755", "unit RuntimeDirectory="), data: ("mysql", "mysql", "0700", "dpkg-statoverride"),
                     logs: ("mysql", "mysql", "0755", "seen while healthy at 2026-01-02T03:04:05Z")}  # never a path not the service's


def _directory(path: str, mode: int = 0o755) -> Path:
    directory = Path(path)
    directory.mkdir(parents=True)
    (directory / "ibdata1").write_text("")
    (directory / "app").mkdir()
    (directory / "app" / "t.frm").write_text("")
    os.chmod(directory, mode)
    return directory


def _started_after(directory: Path, seconds: float = 5.0) -> float:
    """A start of the service ``seconds`` after the directory became what it is (its ctime)."""
    return os.stat(directory).st_ctime + seconds


def test_a_directory_seen_while_the_service_started_with_it_and_passed_is_what_the_host_reports(empty_host: Path) -> None:
    """Debian 13's MariaDB leaves /var/lib/mysql 0755: seen so while healthy, it is the host's word, not the table's 0700."""
    data = _directory(f"{_owned_dirs.STATE}/mysql")
    now = _started_after(data, 60)
    record_seen("db", [str(data)], _started_after(data), now)
    assert seen_while_healthy("db") == [{"path": str(data), "owner": ME, "group": MY_GROUP, "mode": "0755", "tree": True,
                                         "source": "seen while healthy at " + time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))}]
    kept = Path(_known_good.KNOWN_GOOD_DIR) / "db" / OWNED_DIRS
    assert stat.S_IMODE(kept.stat().st_mode) == 0o600 and json.loads(kept.read_text())["directories"][str(data)]["good"]["mode"] == "0755"
    # nothing changed: nothing written again
    written = kept.stat().st_mtime_ns, kept.stat().st_ino
    record_seen("db", [str(data)], _started_after(data), now + 100)
    assert (kept.stat().st_mtime_ns, kept.stat().st_ino) == written


def test_a_mode_changed_under_a_running_service_is_good_only_once_it_started_with_it_and_passed(empty_host: Path) -> None:
    """A chmod -R that went too far under a server that keeps running is never what a heal gives back: until the
    service starts again with it and passes its checks, the last good mode stays the host's word."""
    data = _directory(f"{_owned_dirs.STATE}/redis", 0o750)
    started = _started_after(data, 0.001)
    record_seen("redis", [str(data)], started, time.time())
    time.sleep(0.05)  # past the granularity of the filesystem's clock: the chmod comes after the start
    os.chmod(data, 0o777)
    record_seen("redis", [str(data)], started, time.time())
    assert [entry["mode"] for entry in seen_while_healthy("redis")] == ["0750"]
    # started again with it, and healthy: now it is what the service runs with
    restarted = _started_after(data)
    record_seen("redis", [str(data)], restarted, restarted + 60)
    assert [entry["mode"] for entry in seen_while_healthy("redis")] == ["0777"]


def test_what_was_never_seen_with_a_start_after_it_and_a_directory_gone_while_healthy(empty_host: Path) -> None:
    """A directory first seen when the service's last start is not known (no unit, no pid file) or came before it is
    not reported; one gone under a running server (a runtime directory removed) keeps what it was."""
    runtime = _directory(f"{_owned_dirs.RUN}/redis")
    record_seen("redis", [str(runtime)], None, time.time())
    record_seen("other", [str(runtime)], os.stat(runtime).st_ctime - 60, time.time())
    assert seen_while_healthy("redis") == [] and seen_while_healthy("other") == []
    record_seen("redis", [str(runtime)], _started_after(runtime), time.time())
    for entry in sorted(runtime.rglob("*"), reverse=True):
        entry.rmdir() if entry.is_dir() else entry.unlink()
    runtime.rmdir()
    record_seen("redis", [str(runtime)], time.time(), time.time())
    assert [entry["path"] for entry in seen_while_healthy("redis")] == [str(runtime)]
    record_seen("redis", [], time.time(), time.time())  # no longer one of the service's directories
    assert seen_while_healthy("redis") == []


def test_a_tree_is_one_owner_and_group_below_within_a_bound_and_without_following_links(
        empty_host: Path, monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    data = _directory(f"{_owned_dirs.STATE}/redis")
    outside = tmp_path / "outside"
    outside.mkdir()
    os.symlink(outside, data / "link")  # the link is the service's; what it leads to is not walked
    assert _owned_dirs.on_disk(str(data))["tree"] is True  # type: ignore[index]
    with monkeypatch.context() as bounded:
        bounded.setattr(_owned_dirs, "MAX_TREE_ENTRIES", 3)
        assert _owned_dirs.on_disk(str(data))["tree"] is False  # type: ignore[index]  # too many to tell
    if os.geteuid() == 0:  # a file below given to another account
        os.chown(data / "app" / "t.frm", 65534, 65534)
        assert _owned_dirs.on_disk(str(data))["tree"] is False  # type: ignore[index]
    os.symlink(data, Path(f"{_owned_dirs.STATE}/linked"))
    assert _owned_dirs.on_disk(f"{_owned_dirs.STATE}/linked") is None  # a link to a directory is not the service's directory


def test_a_known_good_directory_others_may_read_is_not_taken_on_its_word(empty_host: Path) -> None:
    data = _directory(f"{_owned_dirs.STATE}/redis")
    record_seen("redis", [str(data)], _started_after(data), time.time())
    assert seen_while_healthy("redis") != []
    os.chmod(Path(_known_good.KNOWN_GOOD_DIR) / "redis", 0o755)
    assert seen_while_healthy("redis") == []


def _service(tmp_path: Path, **declared: Any) -> dict[str, Any]:
    flag = tmp_path / "up"
    flag.write_text("")
    return dict(name="db", status_check=False, check_command=f"test -e {flag}", pidfile=str(tmp_path / "db.pid"), **declared)


def test_service_check_records_a_healthy_services_directories_and_reports_them_when_it_fails(empty_host: Path, tmp_path: Path) -> None:
    """The owners a failing service's directories should have are in its evidence, from what the host says of them."""
    data = _directory(f"{_owned_dirs.STATE}/mysql")
    logs = Path(f"{_owned_dirs.LOGS}/mysql")
    logs.mkdir(parents=True)
    (empty_host / "var/lib/dpkg/statoverride").write_text(f"mysql adm 2750 {logs}\n")
    spec = _service(tmp_path, paths=[str(data)], logs=[f"{logs}/error.log"])
    pidfile = Path(spec["pidfile"])
    pidfile.write_text("4242\n")
    os.utime(pidfile, (_started_after(data),) * 2)  # the server started after its data directory was made
    params: dict[str, Any] = {"services": [spec], "log_lines": 5}
    assert _probe.check_services(params)["healthy"]
    assert not Path(_known_good.KNOWN_GOOD_DIR).exists()  # check mode: nothing recorded
    assert _probe.check_services(params, keep_known_good=True)["healthy"]
    (tmp_path / "up").unlink()
    [failing] = _probe.check_services(params, keep_known_good=True)["failures"]
    assert [(entry["path"], entry["mode"], entry["source"].split(" at ")[0]) for entry in failing["evidence"]["owned_dirs"]] == [
        (str(logs), "2750", "dpkg-statoverride"), (str(data), "0755", "seen while healthy")]
    # a service that keeps no known good configuration records nothing either
    (tmp_path / "up").write_text("")
    off = dict(spec, name="off", known_good=False)
    assert _probe.check_services({"services": [off], "log_lines": 5}, keep_known_good=True)["healthy"]
    assert not (Path(_known_good.KNOWN_GOOD_DIR) / "off").exists()


def test_a_directory_the_services_start_made_is_one_it_started_with(empty_host: Path) -> None:
    """haproxy's /run/haproxy is made as its unit starts (after systemd's InactiveExitTimestamp, before its
    ActiveEnterTimestamp): the service became active with it and passed its checks, so the first check keeps it as good."""
    runtime = empty_host / "run" / "haproxy"
    runtime.mkdir(parents=True)
    made = runtime.stat().st_ctime
    # systemctl --timestamp=unix says the second: the start and the directory all within it
    unit = {"Id": "haproxy.service", "InactiveExitTimestamp": f"@{int(made)}", "ActiveEnterTimestamp": f"@{int(made)}"}
    assert _logs.started([unit], {"name": "haproxy"}) == int(made) + 1
    record_seen("haproxy", [str(runtime)], _logs.started([unit], {"name": "haproxy"}), made + 10)
    [entry] = seen_while_healthy("haproxy")
    assert (entry["path"], entry["mode"]) == (str(runtime), f"{stat.S_IMODE(runtime.stat().st_mode):04o}")
