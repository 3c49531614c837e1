"""The executor on the host, run as the host runs it: a process reading one request on standard input, with the
host's policy and declared services in a root-owned directory. This machine is the host here (no lab), with the
packages, init scripts and /etc of an empty host of the test's own (tests/empty_host.py): the context is what the
executor reads there and on this machine, the decision log the file it writes where there is no journal."""

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
from empty_host import in_python

from ansible_collections.sentinel.heal.plugins.module_utils._executor import REFUSED
from ansible_collections.sentinel.heal.plugins.module_utils._host_approval import MAX_VALIDITY_S
from ansible_collections.sentinel.heal.plugins.module_utils._known_good import keep
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.host_approval import ApprovalSigner
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import host_policy_document, load_policy

ROOT = Path(__file__).resolve().parents[4]
NGINX = {"name": "nginx", "ports": [80], "process": "nginx", "pidfile": "/run/nginx.pid", "logs": ["/var/log/nginx/error.log"]}


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """The configuration the host role writes: the controller's policy document and the declared services."""
    config = tmp_path / "etc"
    config.mkdir()
    (config / "policy.json").write_text(json.dumps(host_policy_document()))
    (config / "services.json").write_text(json.dumps({"host": "node1", "services": [NGINX], "probe_hosts": ["node1"]}))
    return config


def executor(config: Path) -> str:
    """The executor's program as sudo starts it on the host, with the host's configuration in ``config``, its log and
    its used approvals beside it, on the host this test reads."""
    return (f"import sys; {in_python()}; from ansible_collections.sentinel.heal.plugins.module_utils._executor import main; "
            f"sys.exit(main({str(config)!r}, {str(config.parent / 'log' / 'exec.log')!r}, {str(config.parent / 'approvals')!r}))")


def execute(config: Path, request: Any) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    """The exit status, the response and the decision log of one request."""
    log = config.parent / "log" / "exec.log"
    raw = request if isinstance(request, bytes) else json.dumps(request).encode()
    proc = subprocess.run([sys.executable, "-c", executor(config)], input=raw, capture_output=True, timeout=60, check=False,
                          env={"PYTHONPATH": str(ROOT / ".collections"), "PATH": os.environ["PATH"], "SUDO_USER": "sentinel"})
    assert proc.stderr == b"", proc.stderr.decode()
    lines = [json.loads(line.split(" ", 1)[1]) for line in log.read_text().splitlines()] if log.exists() else []
    return proc.returncode, json.loads(proc.stdout), lines


def request(*steps: list[str], step: int = 0, **fields: Any) -> dict[str, Any]:
    return {"host": "node1", "service": "nginx", "policy_version": load_policy().version, "plan": list(steps), "step": step, **fields}


def check_request(services: Any, **fields: Any) -> dict[str, Any]:
    return {"host": "node1", "kind": "check", "services": services, "policy_version": load_policy().version, **fields}


def test_a_step_the_policy_allows_runs_and_its_decision_is_logged(host: Path) -> None:
    rc, response, log = execute(host, request(["df", "-h", "/"]))
    assert rc == 0, response
    assert (response["refused"], response["decision"], response["rule"]) == (False, "allow", "filesystem-usage")
    assert "Filesystem" in response["stdout"]
    assert log == [{"caller": "sentinel", "host": "node1", "service": "nginx", "policy_version": load_policy().version,
                    "step": ["df", "-h", "/"], "decision": "allow", "rule": "filesystem-usage", "reason": response["reason"], "rc": 0}]


@pytest.mark.parametrize(("steps", "rule"), [
    ([["cat", "/etc/shadow"]], "secrets-are-never-read"),
    ([["systemctl", "stop", "ssh"]], "systemctl-stop-protected"),
    ([["kill", "-9", "1"]], "kill-never-targets-everything-or-init"),
    ([["chown", "-h", "www-data", "/var/log/nginx/x/"]], "default-approve"),
])
def test_a_step_the_policy_does_not_allow_is_refused_and_logged(host: Path, steps: list[list[str]], rule: str) -> None:
    rc, response, log = execute(host, request(*steps))
    assert rc == REFUSED
    assert response["refused"] is True and response["rule"] == rule
    assert response["reason"].startswith("this host's policy says")
    assert [entry["decision"] for entry in log] == ["refused"] and log[0]["step"] == steps[0]


def test_each_step_is_judged_when_it_is_sent_and_a_plan_stopping_its_service_is_refused(host: Path) -> None:
    rc, response, _log = execute(host, request(["systemctl", "restart", "nginx"], ["cat", "/etc/shadow"], step=1))
    assert rc == REFUSED and response["rule"] == "secrets-are-never-read"
    rc, response, _log = execute(host, request(["systemctl", "stop", "nginx"]))
    assert rc == REFUSED and response["rule"] == "plan-leaves-service-stopped"


def test_another_policy_version_refuses_everything_and_says_how_to_fix_it(host: Path) -> None:
    rc, response, log = execute(host, request(["df", "-h", "/"], policy_version="0123456789abcdef"))
    assert rc == REFUSED and response["rule"] == "policy-version"
    assert "apply the sentinel.heal.host role" in response["reason"] and "0123456789abcdef" in response["reason"]
    assert log[0]["decision"] == "refused"


def test_a_read_that_changes_things_is_refused_as_a_read(host: Path) -> None:
    rc, response, _log = execute(host, request(["systemctl", "restart", "nginx"], kind="read"))
    assert rc == REFUSED and response["refused"] is True


@pytest.mark.parametrize(("raw", "field"), [
    (b"not json", "request"),
    (b"[1]", "request"),
    (json.dumps({"host": "node1"}).encode(), "service"),
    (json.dumps({"host": "node1", "service": "nginx", "policy_version": "x", "plan": [], "step": 0}).encode(), "plan"),
    (json.dumps({"host": "node1", "service": "nginx", "policy_version": "x", "plan": [["df"]], "step": 1}).encode(), "step"),
    (json.dumps({"host": "node1", "service": "nginx", "policy_version": "x", "plan": [["df"]], "step": 0, "timeout": 0}).encode(), "timeout"),
])
def test_a_malformed_request_is_refused_naming_the_field(host: Path, raw: bytes, field: str) -> None:
    rc, response, log = execute(host, raw)
    assert rc == REFUSED and response["rule"] == "request"
    assert f"field: {field}" in response["reason"]
    assert log[0]["decision"] == "refused"


def test_an_undeclared_service_is_refused(host: Path) -> None:
    rc, response, _log = execute(host, {**request(["df", "-h", "/"]), "service": "sshd"})
    assert rc == REFUSED and response["rule"] == "undeclared-service"


def test_a_policy_others_may_write_is_not_the_hosts_and_nothing_runs(host: Path) -> None:
    (host / "policy.json").chmod(0o666)
    rc, response, _log = execute(host, request(["df", "-h", "/"]))
    assert rc == REFUSED and response["rule"] == "host-configuration" and "only root may write" in response["reason"]


def test_a_check_reads_the_declared_service_as_the_host_declares_it(host: Path) -> None:
    rc, response, log = execute(host, check_request(["nginx"], log_lines=5))
    assert rc == 0 and response["refused"] is False, response
    [checked] = response["check"]["services"]
    assert checked["name"] == "nginx" and checked["spec"]["pidfile"] == "/run/nginx.pid" and checked["spec"]["status_check"] is True
    assert log[0]["step"] == ["service_check", "nginx"] and log[0]["decision"] == "allow"


@pytest.mark.parametrize(("services", "rule"), [
    (["sshd"], "undeclared-service"),
    ([{"name": "nginx", "logs": ["/etc/shadow"]}], "request"),
    ([], "request"),
])
def test_a_check_of_what_the_host_does_not_declare_is_refused(host: Path, services: list[Any], rule: str) -> None:
    """The request names services; what is read for them (logs, paths, commands) is the host's declaration alone."""
    rc, response, _log = execute(host, check_request(services))
    assert rc == REFUSED and response["rule"] == rule


def test_a_check_asks_to_keep_the_last_known_good_configuration_with_true_or_false_only(host: Path) -> None:
    rc, response, _log = execute(host, {**check_request(["nginx"]), "keep_known_good": "yes"})
    assert rc == REFUSED and response["rule"] == "request" and "field: keep_known_good" in response["reason"]


def test_a_check_under_another_policy_version_is_refused_until_the_role_is_applied_again(host: Path) -> None:
    rc, response, _log = execute(host, check_request(["nginx"], policy_version="0123456789abcdef"))
    assert rc == REFUSED and response["rule"] == "policy-version" and "apply the sentinel.heal.host role" in response["reason"]
    rc, response, _log = execute(host, {"host": "node1", "kind": "check", "services": ["nginx"]})
    assert rc == REFUSED and response["rule"] == "request" and response["reason"].startswith("the request lacks policy_version (str)")


def test_a_policy_document_that_is_not_one_refuses_with_its_reason_not_a_traceback(host: Path) -> None:
    (host / "policy.json").write_text(json.dumps({"layers": "none"}))
    rc, response, log = execute(host, request(["df", "-h", "/"]))
    assert rc == REFUSED and response["rule"] == "executor-error"
    assert "a policy document has a version" in response["reason"] and "Traceback" not in response["reason"]
    assert log[0]["decision"] == "refused"


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


@pytest.fixture
def approver(host: Path, tmp_path: Path) -> ApprovalSigner:
    """Alice's SSH key (hers, not the controller's), listed on the host as the role writes host_approvers."""
    key = tmp_path / "alice" / "id_ed25519"
    key.parent.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", str(key)], check=True)
    (host / "approvers").write_text(f'alice namespaces="sentinel-heal-approval" {key.with_suffix(".pub").read_text()}')
    return ApprovalSigner.from_options(str(key), "alice")


# a command the policy does not know: it goes to a person (default-approve), and runs harmlessly here
NEEDS_A_PERSON = ["echo", "approved"]


def approved(signer: ApprovalSigner, *steps: list[str], host_name: str = "node1", nonce: str = "plan-1", now: float | None = None,
             **fields: Any) -> dict[str, Any]:
    approval = signer.sign(host_name, "nginx", steps, nonce=nonce, now=time.time() if now is None else now)
    return request(*steps, approval=approval, **fields)


def test_a_step_a_person_approved_runs_with_their_signature_once_and_the_log_names_them(host: Path, approver: ApprovalSigner) -> None:
    rc, response, _log = execute(host, request(NEEDS_A_PERSON))
    assert rc == REFUSED and response["rule"] == "default-approve" and "signed by a key the host lists" in response["reason"]
    sent = approved(approver, NEEDS_A_PERSON)
    rc, response, log = execute(host, sent)
    assert rc == 0 and response["stdout"] == "approved\n" and response["approved_by"] == "alice", response
    assert log[-1]["approved_by"] == "alice" and log[-1]["decision"] == "approve"
    rc, response, _log = execute(host, sent)
    assert rc == REFUSED and response["rule"] == "approval" and "was used for step 1 already" in response["reason"]


def test_an_approval_that_does_not_hold_runs_nothing(host: Path, approver: ApprovalSigner, tmp_path: Path) -> None:
    other = tmp_path / "mallory"
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(other)], check=True)
    marker = tmp_path / "ran"
    plan = [["touch", str(marker)]]
    forged = dict(approved(approver, *plan), approval=ApprovalSigner.from_options(str(other), "alice").sign("node1", "nginx", plan, "p", time.time()))
    swapped = dict(approved(approver, ["echo", "something", "else"]), plan=plan)
    cases = {
        "a key the host does not list": (forged, "the signature is not alice's"),
        "another plan than the one signed": (swapped, "the signature is not alice's"),
        "signed for another host": (approved(approver, *plan, host_name="node2", nonce="p2"), "the signature is not alice's"),
        "sent to another host": (approved(approver, *plan, host="node2", nonce="p3"), "this host is node1, the request names node2"),
        "expired": (approved(approver, *plan, nonce="p4", now=time.time() - 3600), "the approval expired"),
    }
    for case, (sent, said) in cases.items():
        rc, response, _log = execute(host, sent)
        assert rc == REFUSED and response["rule"] == "approval" and said in response["reason"], (case, response)
    (host / "approvers").write_text("# Ansible managed: none listed\n")
    rc, response, _log = execute(host, approved(approver, *plan, nonce="p5"))
    assert rc == REFUSED and "this host accepts no approvals" in response["reason"]
    assert not marker.exists()


def test_an_approval_signed_to_hold_for_more_than_a_day_runs_nothing_as_it_would_outlive_its_used_once_record(
        host: Path, approver: ApprovalSigner, tmp_path: Path) -> None:
    """The host forgets an approval it used two days later: one valid longer could then be sent again and run again."""
    marker = tmp_path / "ran"
    plan = [["touch", str(marker)]]
    lasting = dataclasses.replace(approver, validity=MAX_VALIDITY_S + 3600)
    rc, response, _log = execute(host, request(*plan, approval=lasting.sign("node1", "nginx", plan, nonce="lasting", now=time.time())))
    assert rc == REFUSED and response["rule"] == "approval", response
    assert f"an approval is valid for at most {MAX_VALIDITY_S} seconds" in response["reason"]
    assert not marker.exists()


def test_an_approval_never_runs_what_the_policy_blocks(host: Path, approver: ApprovalSigner) -> None:
    rc, response, _log = execute(host, approved(approver, ["cat", "/etc/shadow"]))
    assert rc == REFUSED and response["rule"] == "secrets-are-never-read" and response["decision"] == "block"


def sleeping(marker: str) -> list[int]:
    return [int(pid) for pid in subprocess.run(["pgrep", "-f", f"sleep {marker}"], capture_output=True, text=True, check=False).stdout.split()]


def test_a_step_past_its_timeout_or_told_to_stop_is_stopped_with_what_it_started(host: Path, approver: ApprovalSigner) -> None:
    """As sudo stops a command it ran: nothing the controller asked for outlives the request (the job killed, its
    timeout run out)."""
    rc, response, _log = execute(host, approved(approver, ["sleep", "31.5"], nonce="timeout", timeout=1))
    assert (rc, response["rc"], response["stderr"]) == (124, 124, "killed on the host at its timeout of 1 s") and sleeping("31.5") == []

    sent = host.parent / "request.json"
    sent.write_text(json.dumps(approved(approver, ["sleep", "32.5"], nonce="stopped")))
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


def test_an_approval_key_that_cannot_sign_is_refused_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "not-a-key").write_text("hello\n")
    for key, field in ((tmp_path / "missing", "approval_key"), (tmp_path / "not-a-key", "approval_key")):
        with pytest.raises(ConfigError) as raised:
            ApprovalSigner.from_options(str(key), "alice")
        assert raised.value.field == field
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "key")], check=True)
    with pytest.raises(ConfigError, match="approver is a name the host lists"):
        ApprovalSigner.from_options(str(tmp_path / "key"), "Alice Smith")


def test_what_a_step_prints_is_redacted_before_the_answer_leaves_the_host(host: Path, approver: ApprovalSigner) -> None:
    """systemctl cat of the incident's unit prints its Environment= values: the executor masks them, and tokens, itself."""
    # where the calling account (the step runs as it) can read it
    with tempfile.NamedTemporaryFile("w", suffix=".service") as unit:
        unit.write("[Service]\nEnvironment=API_TOKEN=hunter2\nEnvironmentFile=/etc/default/app\nall good\n")
        unit.flush()
        os.chmod(unit.name, 0o644)
        rc, response, _log = execute(host, approved(approver, ["cat", unit.name], nonce="printed"))
    assert rc == 0 and response["stdout"] == "[Service]\nEnvironment=********\nEnvironmentFile=********\nall good\n", response
