"""The executor on the host, run as the host runs it: a process reading one request on standard input, with the
host's policy and declared services in a root-owned directory. This machine is the host here (no lab), with the
packages, init scripts and /etc of an empty host of the test's own (tests/empty_host.py): the context is what the
executor reads there and on this machine, the decision log the file it writes where there is no journal."""

from __future__ import annotations

import dataclasses
import hashlib
import json
import os
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import pytest
from empty_host import in_python

from ansible_collections.sentinel.heal.plugins.module_utils._guard.approvals import MAX_VALIDITY_S
from ansible_collections.sentinel.heal.plugins.module_utils._host import probe as _probe
from ansible_collections.sentinel.heal.plugins.module_utils._host.executor import REFUSED, SAFE_PATH, _with_defaults
from ansible_collections.sentinel.heal.plugins.module_utils._host.known_good import keep
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.host_approval import ApprovalSigner
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import host_policy_document, load_policy

ROOT = Path(__file__).resolve().parents[5]
NGINX = {"name": "nginx", "ports": [80], "process": "nginx", "pidfile": "/run/nginx.pid", "logs": ["/var/log/nginx/error.log"]}


@pytest.fixture
def host(tmp_path: Path, empty_host: Path) -> Path:
    """The configuration the host role writes: the controller's policy document and the declared services; the empty
    host has nginx's init script, which says it is stopped (so nginx is not_running there, whatever runs on this machine)."""
    script = empty_host / "etc" / "init.d" / "nginx"
    script.write_text("#!/bin/sh\nexit 3\n")
    script.chmod(0o755)
    config = tmp_path / "etc"
    config.mkdir()
    (config / "policy.json").write_text(json.dumps(host_policy_document()))
    (config / "services.json").write_text(json.dumps({"host": "node1", "services": [NGINX], "probe_hosts": ["node1"]}))
    return config


def executor(config: Path) -> str:
    """The executor's program as sudo starts it on the host, with the host's configuration in ``config``, its log and
    its used approvals beside it, on the host this test reads."""
    return (f"import sys; {in_python()}; from ansible_collections.sentinel.heal.plugins.module_utils._host.executor import main; "
            f"sys.exit(main({str(config)!r}, {str(config.parent / 'log' / 'exec.log')!r}, {str(config.parent / 'approvals')!r}))")


def execute(config: Path, request: Any) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    """The exit status, the response and the decision log of one request; a step that does not say which failure its
    plan was made for is sent for the failure the service has on this host now (as the controller's check saw it)."""
    log = config.parent / "log" / "exec.log"
    request = for_the_failure_now(config, request)
    raw = request if isinstance(request, bytes) else json.dumps(request).encode()
    proc = subprocess.run([sys.executable, "-c", executor(config)], input=raw, capture_output=True, timeout=60, check=False,
                          env={"PYTHONPATH": str(ROOT / ".collections"), "PATH": os.environ["PATH"], "SUDO_USER": "sentinel"})
    assert proc.stderr == b"", proc.stderr.decode()
    lines = [json.loads(line.split(" ", 1)[1]) for line in log.read_text().splitlines()] if log.exists() else []
    return proc.returncode, json.loads(proc.stdout), lines


def for_the_failure_now(config: Path, request: Any) -> Any:
    """A step that does not say which failure its plan was made for, sent for the failure its service has on the host
    this test reads now (as the controller's check would see it)."""
    if isinstance(request, dict) and request.get("kind", "step") == "step" and "failure_class" not in request:
        return {**request, **failing_now(config, request.get("service"))}
    return request


def failing_now(config: Path, service: Any) -> dict[str, Any]:
    """The failure class of the declared service's failure on the host this test reads, as its check finds it now (empty
    for a healthy or undeclared service), and a fingerprint of the controller's for it."""
    services = json.loads((config / "services.json").read_text())["services"]
    spec = next((spec for spec in services if spec["name"] == service), None)
    checked = spec and _probe.check_one(_with_defaults(spec, _probe.SERVICE_OPTIONS), _probe.detect_service_manager(), 1,
                                        [other for other in services if other is not spec])
    return {"failure_class": "" if not checked or checked["healthy"] else checked["failure_class"], "fingerprint": "0" * 32}


def request(*steps: list[str], step: int = 0, **fields: Any) -> dict[str, Any]:
    """A step of a plan, in a run of its own unless ``run`` says which."""
    return {"host": "node1", "service": "nginx", "policy_version": load_policy().version, "plan": list(steps), "step": step,
            "run": f"run-{uuid.uuid4().hex}", **fields}


def check_request(services: Any, **fields: Any) -> dict[str, Any]:
    return {"host": "node1", "kind": "check", "services": services, "policy_version": load_policy().version, **fields}


def test_a_step_the_policy_allows_runs_and_its_decision_is_logged(host: Path) -> None:
    sent = request(["df", "-h", "/"])
    rc, response, log = execute(host, sent)
    assert rc == 0, response
    assert (response["refused"], response["decision"], response["rule"]) == (False, "allow", "filesystem-usage")
    assert "Filesystem" in response["stdout"]
    assert log == [{"caller": "sentinel", "host": "node1", "service": "nginx", "policy_version": load_policy().version,
                    "step": ["df", "-h", "/"], "decision": "allow", "rule": "filesystem-usage", "reason": response["reason"], "rc": 0,
                    "run": sent["run"], "failure_class": "not_running", "fingerprint": "0" * 32}]


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


def test_what_counts_as_known_good_is_the_hosts_to_say_whatever_the_check_asks(host: Path, empty_host: Path, tmp_path: Path) -> None:
    """A caller that never asks to keep cannot hold an older copy as good: every check of a healthy service keeps its
    configuration as it is now (a person's edit since included)."""
    site = tmp_path / "site.conf"
    site.write_text("server { listen 80; }\n")
    _declare(host, [{"name": "site", "status_check": False, "check_command": "true", "configs": [str(site)]}])
    manifest = empty_host / "var" / "lib" / "sentinel-heal" / "known-good" / "site" / "manifest.json"
    rc, response, _log = execute(host, check_request(["site"], keep_known_good=False))
    assert rc == 0 and manifest.is_file(), response
    site.write_text("server { listen 80; server_tokens off; }\n")  # an administrator's hardening edit
    rc, response, _log = execute(host, check_request(["site"]))
    assert rc == 0 and response["check"]["services"][0]["known_good"]["changed"] is True, response
    kept = {entry["path"]: entry["sha256"] for entry in response["check"]["services"][0]["known_good"]["files"]}
    assert kept[str(site)] == hashlib.sha256(site.read_bytes()).hexdigest()


SITE_UP = {"name": "site", "status_check": False, "check_command": "true"}


def test_the_check_says_the_hosts_own_restore_setting_for_what_a_service_leaves_unsaid(host: Path) -> None:
    """The controller plans a restore within it (#52: with auto on the controller only, a restore the host sends to a
    person waits for one, never ends refused)."""
    _declare(host, [{"name": "site", "status_check": False, "check_command": "false"},
                    {"name": "own", "status_check": False, "check_command": "false", "restore_known_good": "off"}],
             restore_known_good="approve")
    rc, response, _log = execute(host, check_request(["site", "own"]))
    assert rc == 0, response
    assert {failure["name"]: failure["spec"]["restore_known_good"] for failure in response["check"]["failures"]} == {
        "site": "approve", "own": "off"}


def test_a_plan_for_a_failure_does_not_run_on_a_healthy_service_unless_a_person_approved_it(
        host: Path, approver: ApprovalSigner, tmp_path: Path) -> None:
    """The incident is the host's to see: a healthy service is not restarted, repaired or restored on the request's
    word; a step a person signed runs (they looked)."""
    _declare(host, [SITE_UP])
    witness = tmp_path / "ran"
    plan = ["touch", str(witness)]
    for claimed in ({}, {"failure_class": "not_running", "fingerprint": "0" * 32}):
        rc, response, log = execute(host, request(["df", "-h", "/"], service="site", **claimed))
        assert rc == REFUSED and response["rule"] == "service-healthy", response
        assert "site is healthy on this host (true: ok)" in response["reason"] and log[-1]["rule"] == "service-healthy"
    signer_plan = approver.sign("node1", "site", [plan], nonce="healthy", now=time.time())
    rc, response, _log = execute(host, request(plan, service="site", approval=signer_plan))
    assert rc == 0 and witness.exists() and response["approved_by"] == "alice", response


def test_a_plan_made_for_another_failure_than_the_one_on_the_host_runs_nothing(host: Path) -> None:
    """The failure the request names is re-derived on the host before the plan's first step: a plan for another failure
    is refused and nothing of it runs, then or later in the run; one for another moment of the same stopped service (a
    crash loop's not_running, then restart_loop) runs."""
    here = failing_now(host, "nginx")["failure_class"]
    assert here == "not_running"  # on the empty host nginx is not there to run
    for claimed in ("port_conflict", "unhealthy", "masked", ""):
        sent = request(["df", "-h", "/"], ["df", "-i", "/"], failure_class=claimed, fingerprint="f" * 32)
        rc, response, log = execute(host, sent)
        assert rc == REFUSED and response["rule"] == "incident-changed" and log[-1]["rule"] == "incident-changed", response
        assert "nginx fails on this host otherwise than its plan was made for: not_running here" in response["reason"]
        assert response["reason"].endswith(f"the plan is for {claimed}; field: failure_class; value: {claimed!r}; "
                                           "fix: check the service again and plan for the failure it has now"), response["reason"]
        rc, response, _log = execute(host, {**sent, "step": 1})
        assert rc == REFUSED and response["rule"] == "plan-order", response  # its first step never ran
    rc, response, log = execute(host, request(["df", "-h", "/"], failure_class="restart_loop", fingerprint="ab" * 16))
    assert rc == 0 and "Filesystem" in response["stdout"], response
    assert (log[-1]["failure_class"], log[-1]["fingerprint"]) == ("restart_loop", "ab" * 16)  # which incident it was for
    rc, response, _log = execute(host, request(["df", "-h", "/"], failure_class=7))
    assert rc == REFUSED and response["rule"] == "request" and "field: failure_class" in response["reason"]


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
    # sent again in its run, it answers what it did without running again; replayed in a run of its own, it is refused
    rc, again, _log = execute(host, sent)
    assert rc == 0 and again["ran_before"] is True and again["stdout"] == "approved\n"
    rc, response, _log = execute(host, dict(sent, run="replayed"))
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


def _declare(config: Path, services: list[dict[str, Any]], **host: Any) -> None:
    (config / "services.json").write_text(json.dumps({"host": "node1", "services": services, "probe_hosts": ["node1"], **host}))


def test_with_the_maintenance_marker_no_request_of_any_kind_changes_anything_and_the_refusal_names_it(
        host: Path, approver: ApprovalSigner, empty_host: Path, tmp_path: Path) -> None:
    """The marker is a person's word on the host, read there: a step, a read, a step a person signed and a check that
    would keep a known good copy all change nothing while it holds; the signed approval is not used up."""
    marker = empty_host / "etc" / "sentinel-heal" / "maintenance"
    marker.parent.mkdir(parents=True)
    marker.write_text("reason: swapping the disk\nby: alice\n")
    site = tmp_path / "site.conf"
    site.write_text("server { listen 80; }\n")
    _declare(host, [NGINX, {"name": "site", "status_check": False, "check_command": "true", "configs": [str(site)]}])
    signed = approved(approver, NEEDS_A_PERSON, nonce="in-maintenance")
    for sent in (request(["df", "-h", "/"]), request(["df", "-h", "/"], kind="read"), signed):
        rc, response, log = execute(host, sent)
        assert rc == REFUSED and response["rule"] == "maintenance", response
        assert "in maintenance by alice until it is removed" in response["reason"] and "swapping the disk" in response["reason"]
        assert log[-1]["decision"] == "refused" and log[-1]["rule"] == "maintenance"
    kept = empty_host / "var" / "lib" / "sentinel-heal" / "known-good"
    rc, response, _log = execute(host, check_request(["site"]))
    assert rc == 0 and response["check"]["facts"]["maintenance"]["by"] == "alice", response
    assert response["check"]["healthy"] and not list(kept.glob("**/*"))
    marker.unlink()
    rc, response, _log = execute(host, check_request(["site"]))
    assert rc == 0 and (kept / "site" / "manifest.json").is_file(), response  # without the marker the same check keeps it
    rc, response, _log = execute(host, signed)
    assert rc == 0 and response["approved_by"] == "alice", response  # held back, never used up
    rc, response, _log = execute(host, request(["df", "-h", "/"]))
    assert rc == 0 and response["rule"] == "filesystem-usage"


def test_the_hosts_own_mode_observe_runs_no_step_and_review_none_without_a_signed_approval(host: Path, approver: ApprovalSigner) -> None:
    _declare(host, [NGINX], mode="observe")
    rc, response, _log = execute(host, request(["df", "-h", "/"]))
    assert rc == REFUSED and response["rule"] == "observe-mode" and "observe mode: nothing changes it" in response["reason"]
    rc, response, _log = execute(host, request(["df", "-h", "/"], kind="read"))
    assert rc == 0 and response["rule"] == "filesystem-usage", response  # reads still run: they change nothing
    # the service's own mode wins over the host's
    _declare(host, [dict(NGINX, mode="review")], mode="autonomous")
    rc, response, _log = execute(host, request(["df", "-h", "/"]))
    assert rc == REFUSED and response["decision"] == "allow" and "review mode: every step needs a person's approval" in response["reason"]
    rc, response, _log = execute(host, approved(approver, ["df", "-h", "/"], nonce="reviewed"))
    assert rc == 0 and response["approved_by"] == "alice", response


def test_a_request_that_would_flood_the_decision_log_leaves_one_bounded_escaped_entry(host: Path) -> None:
    """A request under the size limit whose fields echo back large (escapes, a long reason) is one entry of at most
    4 KiB with what was cut counted, and no control character reaches the log unescaped."""
    hostile = "\x1b[31m\u202e" + "é\x00" * 4000
    rc, response, log = execute(host, request(["cat", hostile], ["df", "-h", "/"] * 200))
    assert rc == REFUSED, response
    raw = (host.parent / "log" / "exec.log").read_text()
    [line] = raw.splitlines()
    assert len(line.encode()) <= 4096 + 30 and "\x1b" not in raw and "\x00" not in raw and "\u202e" not in raw
    assert log[0]["truncated"] and log[0]["decision"] == "refused"


def test_past_its_rate_a_callers_entries_are_counted_and_said_once(tmp_path: Path) -> None:
    from ansible_collections.sentinel.heal.plugins.module_utils._host.executor import LOG_RATE, LOG_RATE_WINDOW_S, record_decision
    log_file, rates = tmp_path / "exec.log", tmp_path / "decisions"
    refused = dict(refused=True, rule="request", reason="the request is not JSON")
    for _request in range(LOG_RATE + 25):
        record_decision("mallory", {}, refused, str(log_file), str(rates), now=1000.0)
    assert len(log_file.read_text().splitlines()) == LOG_RATE
    record_decision("sentinel", {}, refused, str(log_file), str(rates), now=1001.0)  # another caller is not held back
    record_decision("mallory", {}, refused, str(log_file), str(rates), now=1000.0 + LOG_RATE_WINDOW_S)
    entries = [json.loads(line.split(" ", 1)[1]) for line in log_file.read_text().splitlines()]
    assert len(entries) == LOG_RATE + 3
    assert entries[-2] == {"caller": "mallory", "decision": "suppressed", "suppressed": 25,
                           "reason": f"25 requests suppressed (over {LOG_RATE} a minute)"}
    assert entries[-1]["caller"] == "mallory" and entries[-1]["decision"] == "refused"


def test_what_the_executor_starts_gets_none_of_the_callers_environment(host: Path, tmp_path: Path) -> None:
    """Where sudo keeps PATH, root would run the caller's systemctl: the executor's children see a fixed PATH and none
    of the caller's variables (the check's command here prints what it was given)."""
    shadow = tmp_path / "bin"
    shadow.mkdir()
    (shadow / "printenv").write_text("#!/bin/sh\necho the callers printenv\n")
    (shadow / "printenv").chmod(0o755)
    _declare(host, [{"name": "path", "status_check": False, "check_command": "printenv", "running_indicator": f"PATH={SAFE_PATH}\n"},
                    {"name": "planted", "status_check": False, "check_command": "printenv", "running_indicator": "HINT=planted"},
                    {"name": "sudo", "status_check": False, "check_command": "printenv", "running_indicator": "SUDO_USER=sentinel"}])
    sent = json.dumps(check_request(["path", "planted", "sudo"])).encode()
    caller = {"PYTHONPATH": str(ROOT / ".collections"), "PATH": f"{shadow}:{os.environ['PATH']}", "SUDO_USER": "sentinel",
              "LD_PRELOAD_HINT": "planted", "SYSTEMD_PAGER": "less"}
    proc = subprocess.run([sys.executable, "-c", executor(host)], input=sent, capture_output=True, timeout=60, check=False, env=caller)
    answer = json.loads(proc.stdout)
    # the host's printenv ran, with the fixed PATH; the caller's variable did not reach it, what sudo says of the caller did
    assert {service["name"]: service["healthy"] for service in answer["check"]["services"]} == {"path": True, "planted": False, "sudo": True}


def test_a_plans_steps_run_in_order_once_each_and_a_run_is_one_plan(host: Path) -> None:
    plan = (["df", "-h", "/"], ["df", "-i", "/"])
    rc, response, _log = execute(host, request(*plan, step=1, run="r1"))
    assert rc == REFUSED and response["rule"] == "plan-order" and "before step 1 of its plan has run" in response["reason"]
    rc, first, _log = execute(host, request(*plan, step=0, run="r1"))
    assert rc == 0 and "Filesystem" in first["stdout"] and "ran_before" not in first
    rc, again, _log = execute(host, request(*plan, step=0, run="r1"))
    assert rc == 0 and again["ran_before"] is True and again["stdout"] == first["stdout"]
    rc, response, _log = execute(host, request(["df", "-h", "/"], ["cat", "/etc/hostname"], step=1, run="r1"))
    assert rc == REFUSED and response["rule"] == "plan-run"
    rc, second, _log = execute(host, request(*plan, step=1, run="r1"))
    assert rc == 0 and "Inodes" in second["stdout"]
    rc, response, _log = execute(host, {key: value for key, value in request(*plan).items() if key != "run"})
    assert rc == REFUSED and "field: run" in response["reason"]


def test_a_plan_left_halfway_is_reported_by_the_next_check(host: Path) -> None:
    from ansible_collections.sentinel.heal.plugins.module_utils._host.executor import MAX_TIMEOUT, unfinished_runs
    execute(host, request(["df", "-h", "/"], ["df", "-i", "/"], run="left"))
    execute(host, request(["df", "-h", "/"], run="done"))
    [left] = unfinished_runs(str(host.parent / "approvals"), ["nginx"], time.time() + MAX_TIMEOUT + 1)
    assert (left["run"], left["service"], left["ran"]) == ("left", "nginx", [0])
    assert unfinished_runs(str(host.parent / "approvals"), ["nginx"], time.time()) == []  # still within a step's time
    rc, response, _log = execute(host, check_request(["nginx"]))
    assert rc == 0 and response["check"]["facts"]["unfinished_plans"] == []


def test_a_stop_sent_without_the_start_that_makes_it_safe_runs_with_that_start(
        host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Step 1 of [stop nginx, start nginx] alone would leave nginx stopped: the host runs the piece its plan's rules
    allow alone (both steps), in one request, and answers the start from what it did when it is sent."""
    from ansible_collections.sentinel.heal.plugins.module_utils._host import executor as _executor
    ran: list[list[str]] = []
    monkeypatch.setattr(_executor, "_run", lambda argv, become, timeout: ran.append(list(argv)) or dict(rc=0, stdout="", stderr=""))
    plan = [["systemctl", "stop", "nginx"], ["systemctl", "start", "nginx"]]
    approvals = str(host.parent / "approvals")
    answer = _executor.handle(for_the_failure_now(host, request(*plan, step=0, run="cut")), str(host), approvals)
    assert ran == plan and answer["ran_with_it"] == [{"step": 1, "argv": plan[1], "rc": 0, "refused": False}], answer
    answer = _executor.handle(for_the_failure_now(host, request(*plan, step=1, run="cut")), str(host), approvals)
    assert ran == plan and answer["ran_before"] is True
    # a plan whose stop nothing undoes runs no piece of it
    answer = _executor.handle(for_the_failure_now(host, request(plan[0], ["df", "-h", "/"], step=0, run="stopped")), str(host), approvals)
    assert answer["refused"] and ran == plan


def test_a_directory_made_then_given_its_packages_owner_and_mode_is_repaired_on_the_host_as_one_piece(host: Path, tmp_path: Path) -> None:
    """[mkdir -p D, chown OWNER:GROUP D, chmod MODE D] ends as the package makes D, and runs unattended; its mkdir alone
    would leave D root's with mode 0755, so the host does the three repairs itself, in the one request of step 1."""
    from ansible_collections.sentinel.heal.plugins.module_utils._host import executor as _executor
    directory = tmp_path / "srv" / "nginx-cache"
    directory.parent.mkdir()
    own_policy = tmp_path / "policy.yml"
    own_policy.write_text(f"version: 1\ninclude_default: true\npackage_paths:\n"
                          f"  - {{services: [nginx], path: {directory}, owner: nobody, group: nogroup, mode: '0750'}}\n")
    (host / "policy.json").write_text(json.dumps(host_policy_document(own_policy)))
    (host / "services.json").write_text(json.dumps({"host": "node1", "services": [dict(NGINX, paths=[str(directory)])]}))
    version = load_policy(own_policy).version
    plan = [["mkdir", "-p", str(directory)], ["chown", "nobody:nogroup", str(directory)], ["chmod", "0750", str(directory)]]
    approvals = str(host.parent / "approvals")
    alone = _executor.handle(for_the_failure_now(host, request(plan[0], step=0, run="alone", policy_version=version)), str(host), approvals)
    assert alone["refused"] and alone["rule"] == "plan-leaves-directory-unlike-its-package" and not directory.exists()
    answer = _executor.handle(for_the_failure_now(host, request(*plan, step=0, run="whole", policy_version=version)), str(host), approvals)
    assert answer["rc"] == 0 and [ran["rc"] for ran in answer["ran_with_it"]] == [0, 0], answer
    info = directory.stat()
    assert (info.st_uid, info.st_gid, oct(info.st_mode & 0o7777)) == (65534, 65534, "0o750")


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


def test_a_directory_is_given_back_what_the_host_saw_it_while_the_service_was_healthy_where_no_table_names_it(host: Path, tmp_path: Path) -> None:
    """The executor judges in a context of its own reading: what the service's directory was while the service was
    healthy (kept on the host) is what a repair may give back, and nothing else, with no entry of the policy's table."""
    from ansible_collections.sentinel.heal.plugins.module_utils._host import executor as _executor
    from ansible_collections.sentinel.heal.plugins.module_utils._host import owned_dirs as _owned_dirs
    cache = tmp_path / "srv" / "nginx-cache"
    cache.mkdir(parents=True)
    cache.chmod(0o750)
    os.chown(cache, 65534, 65534)
    (host / "services.json").write_text(json.dumps({"host": "node1", "services": [dict(NGINX, paths=[str(cache)])]}))
    _owned_dirs.record_seen("nginx", [str(cache)], os.stat(cache).st_ctime + 5, time.time())
    cache.chmod(0o777)  # then a chmod that went too far, and nginx failed
    approvals = str(host.parent / "approvals")
    wrong = _executor.handle(for_the_failure_now(host, request(["chmod", "0777", str(cache)])), str(host), approvals)
    assert wrong["refused"] and wrong["rule"] == "mode-repair-needs-a-person", wrong
    answer = _executor.handle(for_the_failure_now(host, request(["install", "-d", "-m", "0750", "-o", "nobody", "-g", "nogroup", str(cache)])),
                              str(host), approvals)
    assert (answer["rc"], answer["rule"]) == (0, "create-runtime-directory"), answer
    assert oct(cache.stat().st_mode & 0o7777) == "0o750"


def test_an_entry_of_nothing_but_control_characters_is_cut_to_its_bound_too() -> None:
    """Every field at its cut length and each character six once escaped: the entry is cut further until it fits."""
    from ansible_collections.sentinel.heal.plugins.module_utils._host.executor import MAX_LOG_ENTRY_BYTES, bounded_log_line
    fields = ("reason", "host", "service", "caller", "rule", "policy_version")
    line = bounded_log_line(dict({field: chr(number) * 512 for number, field in enumerate(fields, start=1)}, step=["\x00" * 500] * 16))
    assert len(line.encode()) <= MAX_LOG_ENTRY_BYTES
    assert set(json.loads(line)["truncated"]) == {"step", *fields}


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


def test_the_evidence_a_check_names_is_read_for_a_failing_service_as_reads_of_its_own_would_be(host: Path, empty_host: Path) -> None:
    """One request for the check and its evidence: each command judged with the host's policy in the failure's context,
    run as the host's rule says (not as the caller says), refused as its own read request would be, and said in the
    check's one decision-log entry; nothing is read for a healthy service, nor while a person's marker holds."""
    reads = [{"service": "site", "argv": ["df", "-h", "/"]}, {"service": "site", "argv": ["cat", "/etc/shadow"]},
             {"service": "site", "argv": ["systemctl", "restart", "site"]}, {"service": "up", "argv": ["df", "-h", "/"]}]
    _declare(host, [{"name": "site", "status_check": False, "check_command": "false"}, {**SITE_UP, "name": "up"}])
    rc, response, log = execute(host, check_request(["site", "up"], evidence=reads))
    assert rc == 0, response
    failing, healthy = response["check"]["services"]
    usage, shadow, restart = failing["evidence"]["commands"]
    assert (usage["argv"], usage["rc"], usage["become"]) == (["df", "-h", "/"], 0, False) and "Filesystem" in usage["output"], usage
    assert shadow["rc"] is None and "secrets-are-never-read" in shadow["output"] and "root:" not in shadow["output"], shadow
    assert restart["rc"] is None and "asked as a read, but" in restart["output"], restart
    assert healthy["healthy"] and "commands" not in healthy.get("evidence", {})
    [entry] = log
    assert entry["step"] == ["service_check", "site", "up"]
    assert entry["reads"] == ["df -h /: allow (filesystem-usage)", "cat /etc/shadow: refused (secrets-are-never-read)",
                              f"systemctl restart site: refused ({restart['output'].split('(', 1)[1].split(')', 1)[0]})"], entry
    marker = empty_host / "etc" / "sentinel-heal" / "maintenance"
    marker.parent.mkdir(parents=True)
    marker.write_text("reason: swapping the disk\nby: alice\n")
    rc, response, log = execute(host, check_request(["site"], evidence=reads[:1]))
    assert rc == 0 and "commands" not in response["check"]["services"][0]["evidence"] and "reads" not in log[-1], response


@pytest.mark.parametrize("evidence", [
    [{"service": "nginx", "argv": "df -h /"}],
    [{"service": "redis", "argv": ["df"]}],
    [{"service": "nginx", "argv": []}],
    [{"service": "nginx", "argv": ["df"]}] * 17,
    {"nginx": ["df"]},
])
def test_evidence_a_check_cannot_read_is_refused_naming_the_field(host: Path, evidence: Any) -> None:
    rc, response, _log = execute(host, check_request(["nginx"], evidence=evidence))
    assert rc == REFUSED and response["rule"] == "request" and "field: evidence" in response["reason"], response


def test_a_signal_goes_through_a_pidfd_held_from_before_the_pid_is_judged_again_so_a_reused_pid_is_never_signalled() -> None:
    """A process of the test's own plays the service's: judged again with its pidfd open, a pid no longer the service's
    is not signalled; a process that ended in the window is not signalled either (nor whatever took its number); one
    still the service's gets the signal the step names."""
    from ansible_collections.sentinel.heal.plugins.module_utils._host.executor import signal_processes
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
    read_now = _executor._context_now
    contexts: list[Any] = []

    def service_then_not(*args: Any) -> Any:
        context = read_now(*args)
        contexts.append(context)
        return dataclasses.replace(context, service_pids=frozenset({other.pid}) if len(contexts) == 1 else frozenset())
    monkeypatch.setattr(_executor, "_context_now", service_then_not)
    ran: list[list[str]] = []  # the plan's start (run with its kill as one piece) never reaches this machine's systemctl
    monkeypatch.setattr(_executor, "_run", lambda argv, become, timeout: ran.append(list(argv)) or dict(rc=0, stdout="", stderr=""))
    plan = [["kill", "-TERM", str(other.pid)], ["systemctl", "start", "nginx"]]
    try:
        answer = _executor.handle(for_the_failure_now(host, request(*plan)), str(host), str(host.parent / "approvals"))
        assert (answer["refused"], answer["rule"]) == (True, "process-changed"), answer
        assert "not signal-own-process as when it was judged" in answer["reason"], answer
        assert other.poll() is None and len(contexts) == 2 and ran == []
    finally:
        other.kill()
        other.wait()
