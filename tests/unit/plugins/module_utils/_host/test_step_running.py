"""The executor's step_running.py, through the executor as the host runs it: a step stopped whole at its timeout, its
output redacted; repairs and restores done on the host without following links; a read as root that could be
redirected refused; a signal sent through a pidfd to the process judged."""

from __future__ import annotations

import dataclasses
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path
from typing import Any

import pytest
from host_executor import (
    NGINX,
    ROOT,
    approved,
    execute,
    executor,
    for_the_failure_now,
    request,
)

from ansible_collections.sentinel.heal.plugins.module_utils._host.executor import REFUSED
from ansible_collections.sentinel.heal.plugins.module_utils._host.known_good import keep
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.host_approval import ApprovalSigner
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import host_policy_document, load_policy


def sleeping(marker: str) -> list[int]:
    return [int(pid) for pid in subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True, check=False).stdout.split()]


def test_a_step_past_its_timeout_or_told_to_stop_is_stopped_with_what_it_started(host: Path, approver: ApprovalSigner) -> None:
    """As sudo stops a command it ran: nothing the controller asked for outlives the request (the job killed, its
    timeout run out)."""
    rc, response, _log = execute(host, approved(approver, ["sleep", "31.5"], nonce="timeout", timeout=1))
    assert (rc, response["rc"], response["stderr"]) == (124, 124, "killed on the host at its timeout of 1 s") and sleeping("31.5") == []

    sent = host.parent / "request.json"
    sent.write_text(json.dumps(for_the_failure_now(host, approved(approver, ["sleep", "32.5"], nonce="stopped"))))
    with sent.open("rb") as request_file:
        running = subprocess.Popen([sys.executable, "-c", executor(host)], stdin=request_file, stdout=subprocess.PIPE,
                                   env={"PYTHONPATH": str(ROOT / ".collections"), "PATH": os.environ["PATH"], "SUDO_USER": "sentinel"})
    deadline = time.monotonic() + 30
    while not sleeping("32.5") and time.monotonic() < deadline:
        time.sleep(0.1)
    assert sleeping("32.5"), "the step never started"
    running.terminate()
    stdout, _stderr = running.communicate(timeout=30)
    assert json.loads(stdout)["rc"] == -9 and sleeping("32.5") == []


def test_what_a_step_prints_is_redacted_before_the_answer_leaves_the_host(host: Path, approver: ApprovalSigner) -> None:
    """systemctl cat of the incident's unit prints its Environment= values: the executor masks them, and tokens, itself."""
    # where the calling account (the step runs as it) can read it
    with tempfile.NamedTemporaryFile("w", suffix=".service") as unit:
        unit.write("[Service]\nEnvironment=API_TOKEN=hunter2\nEnvironmentFile=/etc/default/app\nall good\n")
        unit.flush()
        os.chmod(unit.name, 0o644)
        rc, response, _log = execute(host, approved(approver, ["cat", unit.name], nonce="printed"))
    assert rc == 0 and response["stdout"] == "[Service]\nEnvironment=********\nEnvironmentFile=********\nall good\n", response


REDIS_CONF = ('bind 127.0.0.1\nrequirepass "correct horse battery"\nmasterauth replica-secret-1\naclfile /etc/redis/users.acl\n'
              'user admin on >admin-pass-1 >admin-pass-2 ~* +@all\n')


USERS_ACL = ("user default on #5e884898da28047151d0e56f8dc6292773603d0d6aabbdd62a11ef721d1542d8 ~* &* +@all\n"
             "user app on >app-pass-3 <retired-pass-4 !0b14d501a594442a01c6859541bcb3e8164d183d32937b851835442f69d5c94e ~cache:* +get\n")


LEAKS = ("correct horse", "replica-secret-1", "admin-pass", "app-pass-3", "retired-pass-4", "5e884898da", "0b14d501a5")


def test_a_read_of_the_incidents_configuration_comes_back_with_its_passwords_and_acl_hashes_redacted(host: Path, tmp_path: Path) -> None:
    """redis.conf and its ACL file, read as root through the host's policy: requirepass, masterauth, every password an
    ACL rule adds or removes and every hash it names are masked before the answer leaves the host."""
    configuration = tmp_path / "redis-etc"
    configuration.mkdir()
    (configuration / "redis.conf").write_text(REDIS_CONF)
    (configuration / "users.acl").write_text(USERS_ACL)
    redis = {"name": "redis", "service": "redis-server", "process": "redis-server", "paths": [str(configuration)]}
    (host / "services.json").write_text(json.dumps({"host": "node1", "services": [redis]}))
    for name in ("redis.conf", "users.acl"):
        rc, response, _log = execute(host, request(["cat", str(configuration / name)], service="redis"))
        assert rc == 0 and response["rule"] == "read-files", response
        assert not [leak for leak in LEAKS if leak in json.dumps(response)], response["stdout"]
    assert "requirepass ********" in execute(host, request(["cat", str(configuration / "redis.conf")], service="redis"))[1]["stdout"]


def test_a_read_as_root_through_a_path_a_service_account_could_redirect_is_refused_and_nothing_of_it_leaks(host: Path, tmp_path: Path) -> None:
    """The service's account owns its directory and puts a link there to a directory only root may list (or makes the
    name a link to one): a read the policy allows (ls, run as root) would follow it. The host refuses the read."""
    secrets = tmp_path / "root-only"
    secrets.mkdir(mode=0o700)
    (secrets / "id_rsa.old").write_text("key\n")
    service = tmp_path / "srv"
    service.mkdir()
    (service / "cache").symlink_to(secrets)
    os.chown(service, 65534, 65534)
    root_owned = tmp_path / "root-owned"
    root_owned.mkdir()
    (root_owned / "cache").symlink_to(secrets)
    for path in (service / "cache", root_owned / "cache"):
        rc, response, log = execute(host, request(["ls", "-l", str(path)]))
        assert rc == REFUSED and response["refused"] is True and response["rule"] == "read-could-be-redirected", response
        assert "id_rsa.old" not in json.dumps(response) and "stdout" not in response
        assert log[0]["decision"] == "refused"
    rc, response, _log = execute(host, request(["ls", "-l", str(root_owned)]))
    assert rc == 0 and response["rule"] == "list-directories" and "cache ->" in response["stdout"]
    # names and metadata of the account's own entries are what a person reads first there (ls -ld of its directory)
    (service / "backup").mkdir()
    rc, response, _log = execute(host, request(["ls", "-ld", str(service / "backup")]))
    assert rc == 0 and response["rule"] == "list-directories" and str(service / "backup") in response["stdout"], response


def test_a_restore_the_hosts_configuration_test_still_fails_with_puts_the_edit_back_and_names_that_test(host: Path) -> None:
    """The good copy goes back and the test the host declares for the service runs on it: when the configuration still
    fails (an include it needs is gone), the person's edit is put back as it was, not a half-restored configuration."""
    site, include = host.parent / "site.conf", host.parent / "upstreams.conf"
    site.write_text("server { listen 80 default_server; include upstreams.conf; }\n")
    include.write_text("upstream app { server 127.0.0.1:8080; }\n")
    web = {"name": "web", "configs": [str(site)], "config_test": f"test -s {include}", "restore_known_good": "auto"}
    (host / "services.json").write_text(json.dumps({"host": "node1", "services": [NGINX, web], "probe_hosts": ["node1"]}))
    [good] = keep("web", web, lambda spec: [])["files"]
    edit = "server { listen 80 defualt_server; include upstreams.conf; }\n"
    site.write_text(edit)
    include.unlink()
    rc, response, log = execute(host, request(["sentinel-heal-restore", str(site), good["sha256"]], service="web"))
    assert (rc, response["refused"], response["rule"]) == (1, False, "restore-last-known-good"), response
    assert response["stderr"] == "the configuration test failed with the last known good version, so the current one was put back"
    done = json.loads(response["stdout"])
    assert not done["restored"] and done["test"]["argv"] == ["test", "-s", str(include)] and done["test"]["rc"] == 1
    assert site.read_text() == edit and Path(done["aside"]).read_text() == edit
    assert log[-1]["rc"] == 1


def _data_directory_in_an_accounts_directory(host: Path, tmp_path: Path) -> tuple[Path, str]:
    """A service's data directory at mode 0755 in a directory its account owns, as main is in postgres's
    /var/lib/postgresql/15, and the host's policy and services declaring it the package's, nobody's with mode 0700:
    (the directory, the policy's version)."""
    data = tmp_path / "lib" / "cluster" / "main"
    data.mkdir(parents=True)
    data.chmod(0o755)
    for path in (data.parent, data):
        os.chown(path, 65534, 65534)
    own_policy = tmp_path / "policy.yml"
    own_policy.write_text(f"version: 1\ninclude_default: true\npackage_paths:\n"
                          f"  - {{services: [nginx], path: {data}, owner: nobody, group: nogroup, mode: '0700', tree: true}}\n")
    (host / "policy.json").write_text(json.dumps(host_policy_document(own_policy)))
    (host / "services.json").write_text(json.dumps({"host": "node1", "services": [dict(NGINX, paths=[str(data)])]}))
    return data, load_policy(own_policy).version


def test_a_data_directory_in_a_directory_its_account_owns_gets_its_mode_back_from_the_executor_unattended(host: Path, tmp_path: Path) -> None:
    """The controller, running the command as root, sends this repair to a person (the account could put a link in
    place of the directory); the executor does it itself without following a link, so it runs: install -d on the
    existing directory sets its owner and mode, as the command would."""
    data, version = _data_directory_in_an_accounts_directory(host, tmp_path)
    step = ["install", "-d", "-m", "0700", "-o", "nobody", "-g", "nogroup", str(data)]
    rc, response, log = execute(host, request(step, policy_version=version))
    assert (rc, response["decision"], response["rule"]) == (0, "allow", "create-runtime-directory"), response
    info = data.stat()
    assert (info.st_uid, info.st_gid, oct(info.st_mode & 0o7777)) == (65534, 65534, "0o700")
    assert [(entry["step"], entry["rc"]) for entry in log] == [(step, 0)]


def test_a_link_the_account_put_in_place_of_its_data_directory_is_refused_by_the_executors_repair(host: Path, tmp_path: Path) -> None:
    """The account swapped its directory for a link to root's after the controller's check: the executor's repair
    refuses the link, and neither what it leads to nor the directory set aside changes."""
    data, version = _data_directory_in_an_accounts_directory(host, tmp_path)
    outside = tmp_path / "roots"
    outside.mkdir()
    outside.chmod(0o755)
    data.rename(data.with_name("main.aside"))
    data.symlink_to(outside)
    os.chown(data, 65534, 65534, follow_symlinks=False)
    step = ["install", "-d", "-m", "0700", "-o", "nobody", "-g", "nogroup", str(data)]
    rc, response, log = execute(host, request(step, policy_version=version))
    assert (rc, response["decision"]) == (1, "allow"), response
    assert response["stderr"] == f"{str(data)!r} is a symbolic link: refused to follow it", response
    for untouched, owner in ((outside, 0), (data.with_name("main.aside"), 65534)):
        info = untouched.stat()
        assert (info.st_uid, oct(info.st_mode & 0o7777)) == (owner, "0o755"), untouched
    assert [(entry["step"], entry["rc"]) for entry in log] == [(step, 1)]


def test_a_signal_goes_through_a_pidfd_held_from_before_the_pid_is_judged_again_so_a_reused_pid_is_never_signalled() -> None:
    """A process of the test's own plays the service's: judged again with its pidfd open, a pid no longer the service's
    is not signalled; a process that ended in the window is not signalled either (nor whatever took its number); one
    still the service's gets the signal the step names."""
    from ansible_collections.sentinel.heal.plugins.module_utils._host.step_running import signal_processes
    served = subprocess.Popen(["sleep", "30"])
    try:
        answer = signal_processes(["kill", "-TERM", str(served.pid)], lambda: "no longer the service's")
        assert (answer["refused"], answer["rule"]) == (True, "process-changed") and "nothing was signalled" in answer["reason"], answer
        assert served.poll() is None
        bystanders: list[subprocess.Popen[bytes]] = []

        def ends_and_another_starts() -> None:
            served.kill()
            served.wait()
            bystanders.append(subprocess.Popen(["sleep", "30"]))
        answer = signal_processes(["kill", "-TERM", str(served.pid)], ends_and_another_starts)
        assert (answer["rc"], answer["stderr"]) == (1, f"process {served.pid} had ended: not signalled\n"), answer
        assert bystanders[0].poll() is None
        bystanders[0].kill()
        answer = signal_processes(["kill", "-TERM", str(served.pid)], lambda: None)
        assert (answer["refused"], answer["rule"]) == (True, "process-gone"), answer
    finally:
        served.kill()
        served.wait()
    for argv, ended_by in ((["kill", "-15"], -15), (["kill", "-HUP"], -1), (["kill", "-SIGUSR1"], -10), (["kill"], -15)):
        own = subprocess.Popen(["sleep", "30"])
        answer = signal_processes([*argv, str(own.pid)], lambda: None)
        assert answer["rc"] == 0 and own.wait(timeout=10) == ended_by, (argv, answer)
    assert signal_processes(["kill", "-s", "TERM", "1"], lambda: None)["rule"] == "signal-by-pidfd"


def test_a_kill_allowed_for_the_services_own_process_is_refused_when_that_pid_is_no_longer_the_services_when_signalled(
        host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Judged with the pid in the service's processes, read again once its pidfd is open and found outside them (its
    process ended, the number taken by another): refused, and the process lives."""
    from ansible_collections.sentinel.heal.plugins.module_utils._host import executor as _executor
    other = subprocess.Popen(["sleep", "30"])
    read_now = _executor.context_now
    contexts: list[Any] = []

    def service_then_not(*args: Any) -> Any:
        context = read_now(*args)
        contexts.append(context)
        return dataclasses.replace(context, service_pids=frozenset({other.pid}) if len(contexts) == 1 else frozenset())
    monkeypatch.setattr(_executor, "context_now", service_then_not)
    ran: list[list[str]] = []  # the plan's start (run with its kill as one piece) never reaches this machine's systemctl
    monkeypatch.setattr(_executor, "run_argv", lambda argv, become, timeout: ran.append(list(argv)) or dict(rc=0, stdout="", stderr=""))
    plan = [["kill", "-TERM", str(other.pid)], ["systemctl", "start", "nginx"]]
    try:
        answer = _executor.handle(for_the_failure_now(host, request(*plan)), str(host), str(host.parent / "approvals"))
        assert (answer["refused"], answer["rule"]) == (True, "process-changed"), answer
        assert "not signal-own-process as when it was judged" in answer["reason"], answer
        assert other.poll() is None and len(contexts) == 2 and ran == []
    finally:
        other.kill()
        other.wait()
