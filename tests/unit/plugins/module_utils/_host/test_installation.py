"""What is installed on the host (module_utils/_host/installation.py): a service's packages from dpkg's lists, the
backends its configuration names."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.sentinel.heal.plugins.module_utils._host.installation import backends, installed_by


@pytest.mark.parametrize("unit_file", ["/lib/systemd/system/postgresql@.service", "/usr/lib/systemd/system/postgresql@.service"])
def test_the_packages_of_a_service_and_their_configuration_files_come_from_dpkgs_lists(empty_host: Path, unit_file: str) -> None:
    """dpkg lists /lib/... where a merged-/usr host's systemd names /usr/lib/...; a package's /etc files are what it lists
    there but the directories."""
    etc, info = empty_host / "etc", empty_host / "var" / "lib" / "dpkg" / "info"
    (etc / "logrotate.d").mkdir()
    (etc / "logrotate.d" / "postgresql-common").write_text("/var/log/postgresql/*.log {\n}\n")
    (etc / "postgresql-common" / "pg_upgradecluster.d").mkdir(parents=True)
    (info / "postgresql-common.list").write_text("\n".join([
        "/.", str(etc), f"{etc}/logrotate.d", f"{etc}/logrotate.d/postgresql-common", f"{etc}/postgresql-common",
        f"{etc}/postgresql-common/pg_upgradecluster.d", f"{etc}/postgresql-common/createcluster.conf", "/lib/systemd/system/postgresql@.service",
        "/usr/bin/pg_lsclusters"]) + "\n")
    (info / "nginx-common.list").write_text(f"{etc}/nginx/nginx.conf\n/lib/systemd/system/nginx.service\n")
    assert installed_by([unit_file, None, "/nonexistent/program"]) == {
        "names": ["postgresql-common"], "etc": [f"{etc}/logrotate.d/postgresql-common", f"{etc}/postgresql-common/createcluster.conf"]}


def test_the_backends_of_a_service_are_the_loopback_ports_its_configuration_names_outside_comments_but_its_own(tmp_path: Path) -> None:
    haproxy = tmp_path / "haproxy.cfg"
    haproxy.write_text("frontend storefront\n\tbind :8080\n\tbind 127.0.0.1:8080\nbackend web\n\tserver apache2 127.0.0.1:8081 check\n"
                       "\tserver spare localhost:8082\n# server old 127.0.0.1:7000\n\tserver remote 10.0.0.5:8083\n")
    site = tmp_path / "site.conf"
    site.write_text("location / { proxy_pass http://[::1]:9000/; }\n; server 127.0.0.1:7001\nlisten 127.0.0.10:7002;\n")
    assert backends({"ports": [8080]}, [str(haproxy), str(site), str(tmp_path / "gone.conf")]) == [8081, 8082, 9000]
