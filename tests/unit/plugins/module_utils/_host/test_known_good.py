"""The last known good configuration on the host: what is a service's configuration, what is kept while it is healthy
and never leaves the host, and what changed since, read when it fails (real files, a real dpkg-shaped tree)."""

from __future__ import annotations

import json
import os
import stat
import time
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.sentinel.heal.plugins.module_utils._guard.redact import MASK
from ansible_collections.sentinel.heal.plugins.module_utils._host import known_good as _known_good
from ansible_collections.sentinel.heal.plugins.module_utils._host import probe as _probe
from ansible_collections.sentinel.heal.plugins.module_utils._host.known_good import (
    MAX_FILE_BYTES,
    KnownGoodError,
    changes_since_good,
    configuration_files,
    keep,
    package_changes,
    restore,
)
from ansible_collections.sentinel.heal.plugins.module_utils._host.nofollow import NoFollowRefused

SITE = "server {\n    listen 80 default_server;\n    root /var/www/html;\n}\n"


def _none(_spec: dict[str, Any]) -> list[str]:
    return []


def _tree(tmp_path: Path) -> tuple[Path, Path]:
    """/etc with nginx's package configuration, dpkg's info with its conffiles (one under a multi-arch name)."""
    etc, info = tmp_path / "etc", tmp_path / "info"
    for relative, text in {"nginx/nginx.conf": "include /etc/nginx/sites-enabled/*;\n", "nginx/sites-enabled/default": SITE,
                           "nginx/conf.d/gzip.conf": "gzip on;\n", "nginx/modules-enabled/50-mod.conf": "load_module x;\n",
                           "nginx/snippets/ssl.conf": "ssl on;\n", "nginx/notes/README": "not included\n",
                           "default/nginx": "DAEMON_OPTS=\n", "default/grub.d/x.cfg": "another package's\n",
                           "systemd/system/nginx.service.d/override.conf": "[Service]\nLimitNOFILE=65536\n"}.items():
        path = etc / relative
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(text)
    info.mkdir()
    (info / "nginx-common.conffiles").write_text(f"{etc}/nginx/nginx.conf\n{etc}/default/nginx\n{etc}/nginx/gone.conf remove-on-upgrade\n")
    (info / "nginx:amd64.conffiles").write_text(f"{etc}/nginx/snippets/ssl.conf\n")
    return etc, info


def test_a_services_configuration_is_its_packages_conffiles_what_their_directory_includes_its_drop_ins_and_what_is_declared(
        tmp_path: Path) -> None:
    etc, info = _tree(tmp_path)
    declared = tmp_path / "app.yml"
    declared.write_text("port: 80\n")
    spec = {"name": "nginx", "configs": [str(tmp_path / "*.yml"), str(tmp_path / "missing/*.conf")]}
    found = configuration_files(spec, ["nginx-common", "nginx"], info_dir=str(info), etc=str(etc))
    assert found == sorted([str(declared)] + [str(etc / relative) for relative in (
        "default/nginx", "nginx/conf.d/gzip.conf", "nginx/modules-enabled/50-mod.conf", "nginx/nginx.conf",
        "nginx/sites-enabled/default", "nginx/snippets/ssl.conf", "systemd/system/nginx.service.d/override.conf")])
    # a shared directory (/etc/default) is not the service's: its other packages' include directories are not read
    assert not any("grub.d" in path or "notes" in path for path in found)


def test_a_service_keeps_every_file_of_its_own_configuration_and_the_one_its_maintainer_script_wrote(tmp_path: Path) -> None:
    """apache2 ships 159 conffiles (its default site sorts late); memcached's /etc/memcached.conf no package owns."""
    etc, info = tmp_path / "etc", tmp_path / "info"
    info.mkdir()
    shipped = [etc / "apache2" / "conf-available" / f"{number:03d}.conf" for number in range(158)] + [
        etc / "apache2" / "sites-available" / "000-default.conf"]
    for path in shipped:
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("# shipped\n")
    (info / "apache2.conffiles").write_text("".join(f"{path}\n" for path in shipped))
    assert configuration_files({"name": "apache2"}, ["apache2"], info_dir=str(info), etc=str(etc)) == sorted(map(str, shipped))
    (etc / "memcached.conf").write_text("-m 64\n")
    (etc / "other.conf").write_text("not memcached's\n")
    assert configuration_files({"name": "memcached"}, ["memcached"], info_dir=str(info), etc=str(etc)) == [str(etc / "memcached.conf")]


def _site_spec(tmp_path: Path) -> tuple[dict[str, Any], Path]:
    """A service whose configuration is one site, and whose configuration test (as nginx -t would) finds its listen."""
    site = tmp_path / "site.conf"
    site.write_text(SITE)
    return {"name": "nginx", "configs": [str(tmp_path / "*.conf")], "config_test": f"grep -Eq 'listen [0-9]+ default_server;' {site}"}, site


def test_a_broken_edit_the_running_service_has_not_loaded_is_not_kept_as_good(tmp_path: Path) -> None:
    """The service still runs on the configuration it started with, so every check passes after a broken edit: the edit
    fails the configuration test and is not taken as good; the last good copy stays, and the edit is what changed."""
    spec, site = _site_spec(tmp_path)
    root = str(tmp_path / "known-good")
    [good] = keep("nginx", spec, _none, root=root, now=1000.0)["files"]
    site.write_text(SITE.replace("listen 80", "listen 8o"))
    refused = keep("nginx", spec, _none, root=root, now=2000.0)
    assert not refused["changed"] and refused["files"] == [] and "configuration test (grep -Eq" in refused["refused"], refused
    manifest = json.loads((tmp_path / "known-good" / "nginx" / "manifest.json").read_text())
    assert manifest["files"][str(site)]["sha256"] == good["sha256"]
    [change] = changes_since_good("nginx", spec, 3000.0, root=root)["files"]
    assert change["good_sha256"] == good["sha256"] and "+    listen 8o default_server;" in change["diff"]
    # a change the test passes is the new good
    site.write_text(SITE.replace("/var/www/html", "/srv/www"))
    assert keep("nginx", spec, _none, root=root, now=4000.0)["changed"]


def test_a_healthy_services_files_are_kept_once_root_only_and_the_controller_is_told_names_sizes_and_hashes(tmp_path: Path) -> None:
    spec, site = _site_spec(tmp_path)
    root = tmp_path / "known-good"
    told = keep("nginx", spec, _none, root=str(root), now=1000.0)
    assert told["changed"] and [(f["path"], f["size"], f["kept"]) for f in told["files"]] == [(str(site), len(SITE), True)]
    assert "server" not in json.dumps(told)  # no content leaves the host
    for directory in (root, root / "nginx", root / "nginx" / "blobs"):
        assert stat.S_IMODE(directory.stat().st_mode) == 0o700
    assert (root / "nginx" / "blobs" / told["files"][0]["sha256"]).read_text() == SITE
    # the same again: nothing rewritten, only the time it was last seen good
    again = keep("nginx", spec, _none, root=str(root), now=2000.0)
    assert not again["changed"] and (root / "nginx" / "manifest.json").stat().st_mtime == 2000.0
    # a new good version replaces the old copy
    site.write_text(SITE.replace("80", "8080"))
    assert keep("nginx", spec, _none, root=str(root), now=3000.0)["changed"]
    assert len(list((root / "nginx" / "blobs").iterdir())) == 1


def test_what_changed_since_the_last_good_check_is_a_redacted_diff_with_its_time_and_files_added_and_removed(tmp_path: Path) -> None:
    spec, site = _site_spec(tmp_path)
    extra = tmp_path / "extra.conf"
    extra.write_text("old\n")
    root = str(tmp_path / "known-good")
    keep("nginx", spec, _none, root=root, now=time.time() - 600)
    site.write_text(SITE.replace("default_server", "defualt_server") + "    auth_basic_user_file password=hunter2;\n")
    extra.unlink()
    (tmp_path / "new.conf").write_text("new\n")
    changed = changes_since_good("nginx", spec, time.time(), redact_values=("hunter2",), root=root)
    assert changed is not None and changed["packages"] == []
    by_path = {change["path"]: change for change in changed["files"]}
    assert {path: change["change"] for path, change in by_path.items()} == {
        str(site): "modified", str(extra): "removed", str(tmp_path / "new.conf"): "added"}
    diff = by_path[str(site)]["diff"]
    assert "-    listen 80 default_server;\n+    listen 80 defualt_server;" in diff and "(last known good)" in diff
    assert "hunter2" not in diff
    assert 0 <= by_path[str(site)]["before_failure_s"] < 60 and by_path[str(extra)]["changed_at"] is None


def test_a_service_never_seen_good_has_nothing_to_compare_and_a_large_file_is_known_by_its_hash_only(tmp_path: Path) -> None:
    spec, site = _site_spec(tmp_path)
    root = str(tmp_path / "known-good")
    assert changes_since_good("nginx", spec, time.time(), root=root) is None
    site.write_text("x" * (MAX_FILE_BYTES + 1))
    spec["config_test"] = "true"
    [told] = keep("nginx", spec, _none, root=root)["files"]
    assert not told["kept"] and not list((tmp_path / "known-good" / "nginx" / "blobs").iterdir())
    site.write_text("y" * (MAX_FILE_BYTES + 1))
    [change] = changes_since_good("nginx", spec, time.time(), root=root)["files"]  # type: ignore[index]
    assert (change["change"], change["diff"]) == ("modified", None)


def test_a_known_good_directory_others_may_read_is_not_trusted(tmp_path: Path) -> None:
    spec, site = _site_spec(tmp_path)
    root = tmp_path / "known-good"
    root.mkdir(mode=0o755)
    os.chmod(root, 0o755)
    with pytest.raises(KnownGoodError, match="not a directory only its owner"):
        keep("nginx", spec, _none, root=str(root))
    # nor is what such a directory holds read as what changed
    os.chmod(root, 0o700)
    keep("nginx", spec, _none, root=str(root))
    site.write_text("edited\n")
    assert changes_since_good("nginx", spec, time.time(), root=str(root)) is not None
    os.chmod(root / "nginx", 0o770)
    assert changes_since_good("nginx", spec, time.time(), root=str(root)) is None


def test_package_changes_since_the_last_good_check_are_read_from_dpkgs_log(tmp_path: Path) -> None:
    log = tmp_path / "dpkg.log"
    log.write_text(
        "2026-11-01 10:00:00 upgrade nginx-common:all 1.22.1-9 1.22.1-9+deb12u1\n"
        "2026-11-27 09:00:00 startup packages configure\n"
        "2026-11-27 09:00:01 upgrade nginx:amd64 1.22.1-9 1.22.1-9+deb12u1\n"
        "2026-11-27 09:00:02 upgrade libc6:amd64 2.36-9 2.36-9+deb12u9\n"
        "2026-11-27 09:00:03 remove nginx-common:all 1.22.1-9+deb12u1 <none>\n")
    since = time.mktime(time.strptime("2026-11-20 00:00:00", "%Y-%m-%d %H:%M:%S"))
    changes = package_changes(["nginx", "nginx-common"], since, str(log))
    assert [(c["action"], c["package"], c["before"], c["after"]) for c in changes] == [
        ("upgrade", "nginx", "1.22.1-9", "1.22.1-9+deb12u1"), ("remove", "nginx-common", "1.22.1-9+deb12u1", None)]
    assert package_changes(["nginx"], since, str(tmp_path / "no-log")) == []
    # dpkg writes whole seconds: an upgrade in the second of the last good check, after it, is not lost
    log.write_text("2026-11-20 00:00:00 upgrade nginx:amd64 1.22.1-9 1.22.1-9+deb12u1\n")
    assert [c["after"] for c in package_changes(["nginx"], since + 0.5, str(log))] == ["1.22.1-9+deb12u1"]


def test_an_upgrade_whose_previous_version_apt_still_keeps_names_that_package_file(tmp_path: Path) -> None:
    log, archives = tmp_path / "dpkg.log", tmp_path / "archives"
    archives.mkdir()
    log.write_text("2026-11-27 09:00:01 upgrade nginx:amd64 1:1.22.1-9 1:1.22.1-9+deb12u1\n"
                   "2026-11-27 09:00:02 upgrade nginx-common:all 1.22.1-9 1.22.1-9+deb12u1\n"
                   "2026-11-27 09:00:03 install libnginx-mod-http-geoip:amd64 <none> 1.22.1-9\n")
    cached = archives / "nginx_1%3a1.22.1-9_amd64.deb"
    cached.write_bytes(b"!<arch>\n")
    (archives / "nginx-common_1.22.1-9_all.deb").write_bytes(b"!<arch>\n")
    os.chmod(archives / "nginx-common_1.22.1-9_all.deb", 0o666)  # others may change it: not what a downgrade installs
    changes = package_changes(["nginx", "nginx-common", "libnginx-mod-http-geoip"], 0.0, str(log), str(archives))
    if os.geteuid() == 0:
        assert [c.get("cached") for c in changes] == [str(cached), None, None]
    else:
        assert [c.get("cached") for c in changes] == [None, None, None]  # only a file root owns


def test_service_check_keeps_a_healthy_services_copy_outside_check_mode_and_reads_what_changed_when_it_fails(tmp_path: Path) -> None:
    spec, site = _site_spec(tmp_path)
    known_good = Path(_known_good.KNOWN_GOOD_DIR)
    flag = tmp_path / "up"
    flag.write_text("")
    service = dict(spec, status_check=False, check_command=f"test -e {flag}")
    params: dict[str, Any] = {"services": [service], "log_lines": 5}
    assert "known_good" not in _probe.check_services(params)["services"][0]  # check mode: nothing kept
    assert not known_good.exists()
    [healthy] = _probe.check_services(params, keep_known_good=True)["services"]
    assert healthy["known_good"]["changed"] and [f["path"] for f in healthy["known_good"]["files"]] == [str(site)]
    site.write_text(SITE.replace("listen 80", "listen 8o"))
    flag.unlink()
    [failing] = _probe.check_services(params, keep_known_good=True)["failures"]
    [change] = failing["evidence"]["changes"]["files"]
    assert change["path"] == str(site) and "+    listen 8o default_server;" in change["diff"]
    assert "known_good" not in failing  # a failing service's configuration is never taken as good
    # a service declared without it: nothing kept, nothing read
    site.write_text(SITE)
    flag.write_text("")
    off = dict(service, name="off", known_good=False)
    [checked] = _probe.check_services({"services": [off], "log_lines": 5}, keep_known_good=True)["services"]
    assert "known_good" not in checked and not (known_good / "off").exists()


def test_a_restore_keeps_the_edit_aside_byte_for_byte_puts_the_good_copy_back_and_undoes_itself_when_the_test_fails(
        tmp_path: Path) -> None:
    spec, site = _site_spec(tmp_path)
    os.chmod(site, 0o640)
    root = str(tmp_path / "known-good")
    [good] = keep("nginx", spec, _none, root=root)["files"]
    edit = SITE.replace("default_server", "defualt_server") + "# alice, 03:12\n"
    site.write_text(edit)
    done = restore("nginx", str(site), good["sha256"], ["grep", "-q", "default_server", str(site)], root=root, now=1_795_000_000.0)
    assert done["restored"] and done["test"]["rc"] == 0 and site.read_text() == SITE and stat.S_IMODE(site.stat().st_mode) == 0o640
    assert done["aside"] == f"{root}/nginx/aside/20261118T110640Z{site}" and Path(done["aside"]).read_text() == edit
    # a configuration test that fails puts the current version back: nothing is left half-restored
    site.write_text(edit)
    undone = restore("nginx", str(site), good["sha256"], ["false"], root=root, now=1_795_000_100.0)
    assert not undone["restored"] and undone["test"]["rc"] == 1 and site.read_text() == edit
    assert Path(undone["aside"]).read_text() == edit


def test_what_the_configuration_test_of_a_restore_prints_is_redacted_before_it_leaves_the_host(tmp_path: Path) -> None:
    """A configuration test quotes the line it stops at, a credential in it included; the restore's answer goes to the
    controller."""
    spec, site = _site_spec(tmp_path)
    root = str(tmp_path / "known-good")
    [good] = keep("nginx", spec, _none, root=root)["files"]
    site.write_text("edited\n")
    quoting = ["sh", "-c", f"echo 'unknown directive in {site}:3: auth_basic_user_file password=hunter2;'; exit 1"]
    undone = restore("nginx", str(site), good["sha256"], quoting, root=root)
    assert undone["test"]["output"] == f"unknown directive in {site}:3: auth_basic_user_file password={MASK};\n", undone


def test_a_restore_of_a_copy_other_than_the_one_approved_is_refused_and_changes_nothing(tmp_path: Path) -> None:
    spec, site = _site_spec(tmp_path)
    root = str(tmp_path / "known-good")
    [good] = keep("nginx", spec, _none, root=root)["files"]
    site.write_text("edited\n")
    with pytest.raises(KnownGoodError, match=r"no last known good copy of .* with hash 000000000000"):
        restore("nginx", str(site), "0" * 64, root=root)
    # the copy on disk no longer matches its hash: it is no copy
    (tmp_path / "known-good" / "nginx" / "blobs" / good["sha256"]).write_text("tampered\n")
    with pytest.raises(KnownGoodError):
        restore("nginx", str(site), good["sha256"], root=root)
    assert site.read_text() == "edited\n"


def test_a_link_to_a_system_file_among_the_configuration_is_never_kept_diffed_or_put_back(tmp_path: Path) -> None:
    """The service's account owns its configuration directory: a link to /etc/passwd put there is no configuration of
    the service (nothing of passwd is kept, nor shown in a diff), and one swapped in place of a kept file after the
    good check is neither read nor written through when the restore comes."""
    spec, site = _site_spec(tmp_path)
    passwd = tmp_path / "passwd"
    passwd.write_text("root:x:0:0:root:/root:/bin/bash\n")
    (tmp_path / "users.conf").symlink_to(passwd)
    assert configuration_files(spec, []) == [str(site)]
    root = str(tmp_path / "known-good")
    [good] = keep("nginx", spec, _none, root=root)["files"]
    assert good["path"] == str(site)

    passwd.write_text("root:x:0:0:root:/root:/bin/bash\nmallory:x:0:0::/:/bin/sh\n")
    site.unlink()
    site.symlink_to(passwd)
    changes = changes_since_good("nginx", spec, time.time(), root=root)
    assert changes is not None and "mallory" not in json.dumps(changes)
    with pytest.raises(NoFollowRefused, match="symbolic link"):
        restore("nginx", str(site), good["sha256"], root=root)
    assert passwd.read_text() == "root:x:0:0:root:/root:/bin/bash\nmallory:x:0:0::/:/bin/sh\n" and site.is_symlink()
    assert not (tmp_path / "known-good" / "nginx" / "aside").exists()


def test_a_link_a_person_replaced_by_an_edited_copy_is_its_changed_file_and_is_put_back_as_the_link(tmp_path: Path) -> None:
    """sites-enabled/000-default.conf is a link a2ensite made; a person who copies the site over it and edits the copy
    changed the site: the diff is against what the link led to, and the restore puts the link back, the copy aside
    (a web server of no built-in configuration test: the test given here stands for its own)."""
    available, enabled = tmp_path / "sites-available", tmp_path / "sites-enabled"
    available.mkdir()
    enabled.mkdir()
    (available / "000-default.conf").write_text(SITE)
    link = enabled / "000-default.conf"
    link.symlink_to("../sites-available/000-default.conf")
    spec = {"name": "web", "configs": [str(available / "*"), str(enabled / "*")]}
    root = str(tmp_path / "known-good")
    [good] = keep("web", spec, _none, root=root)["files"]
    assert good["path"] == str(available / "000-default.conf")

    edit = SITE.replace("listen 80", "lisen 80")
    link.unlink()
    link.write_text(edit)
    link.chmod(0o640)
    [change] = changes_since_good("web", spec, time.time(), root=root)["files"]
    assert change["path"] == str(link) and change["change"] == "modified" and change["good_link"] == "../sites-available/000-default.conf"
    assert change["good_sha256"] == good["sha256"] and "+    lisen 80 default_server;" in change["diff"], change

    undone = restore("web", str(link), good["sha256"], ["false"], root=root)
    assert not undone["restored"] and not link.is_symlink() and link.read_text() == edit and stat.S_IMODE(link.stat().st_mode) == 0o640
    done = restore("web", str(link), good["sha256"], ["test", "-L", str(link)], root=root)
    assert done["restored"] and done["link"] == "../sites-available/000-default.conf" and done["test"]["rc"] == 0, done
    assert os.readlink(link) == "../sites-available/000-default.conf" and Path(done["aside"]).read_text() == edit
    assert changes_since_good("web", spec, time.time(), root=root)["files"] == []


def test_a_link_is_not_put_back_once_the_file_it_led_to_changed_too(tmp_path: Path) -> None:
    """The person approved the diff against the site as it was good; a link back to a site changed since is not that."""
    available, enabled = tmp_path / "sites-available", tmp_path / "sites-enabled"
    available.mkdir()
    enabled.mkdir()
    (available / "default").write_text(SITE)
    (enabled / "default").symlink_to(available / "default")
    spec = {"name": "web", "configs": [str(available / "*"), str(enabled / "*")]}
    root = str(tmp_path / "known-good")
    [good] = keep("web", spec, _none, root=root)["files"]
    (enabled / "default").unlink()
    (enabled / "default").write_text("edited\n")
    (available / "default").write_text("also edited\n")
    with pytest.raises(KnownGoodError, match=r"the file the link .* led to, changed since it was good"):
        restore("web", str(enabled / "default"), good["sha256"], root=root)
    assert (enabled / "default").read_text() == "edited\n" and not (enabled / "default").is_symlink()
