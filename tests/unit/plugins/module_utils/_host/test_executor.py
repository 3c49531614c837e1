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
import time
from pathlib import Path
from typing import Any

import pytest
from host_executor import (
    NEEDS_A_PERSON,
    NGINX,
    ROOT,
    SITE_UP,
    approved,
    check_request,
    declare,
    execute,
    executor,
    failing_now,
    request,
)

from ansible_collections.sentinel.heal.plugins.module_utils._guard.approvals import MAX_VALIDITY_S
from ansible_collections.sentinel.heal.plugins.module_utils._host.executor import REFUSED
from ansible_collections.sentinel.heal.plugins.module_utils._host.step_running import SAFE_PATH
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.host_approval import ApprovalSigner
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import load_policy


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


def test_a_read_that_changes_things_is_refused_as_a_read(host: Path) -> None:
    rc, response, _log = execute(host, request(["systemctl", "restart", "nginx"], kind="read"))
    assert rc == REFUSED and response["refused"] is True


def test_an_undeclared_service_is_refused(host: Path) -> None:
    rc, response, _log = execute(host, {**request(["df", "-h", "/"]), "service": "sshd"})
    assert rc == REFUSED and response["rule"] == "undeclared-service"


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
    declare(host, [{"name": "site", "status_check": False, "check_command": "true", "configs": [str(site)]}])
    manifest = empty_host / "var" / "lib" / "sentinel-heal" / "known-good" / "site" / "manifest.json"
    rc, response, _log = execute(host, check_request(["site"], keep_known_good=False))
    assert rc == 0 and manifest.is_file(), response
    site.write_text("server { listen 80; server_tokens off; }\n")  # an administrator's hardening edit
    rc, response, _log = execute(host, check_request(["site"]))
    assert rc == 0 and response["check"]["services"][0]["known_good"]["changed"] is True, response
    kept = {entry["path"]: entry["sha256"] for entry in response["check"]["services"][0]["known_good"]["files"]}
    assert kept[str(site)] == hashlib.sha256(site.read_bytes()).hexdigest()


def test_a_plan_for_a_failure_does_not_run_on_a_healthy_service_unless_a_person_approved_it(
        host: Path, approver: ApprovalSigner, tmp_path: Path) -> None:
    """The incident is the host's to see: a healthy service is not restarted, repaired or restored on the request's
    word; a step a person signed runs (they looked)."""
    declare(host, [SITE_UP])
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


def test_an_approval_key_that_cannot_sign_is_refused_before_anything_runs(tmp_path: Path) -> None:
    (tmp_path / "not-a-key").write_text("hello\n")
    for key, field in ((tmp_path / "missing", "approval_key"), (tmp_path / "not-a-key", "approval_key")):
        with pytest.raises(ConfigError) as raised:
            ApprovalSigner.from_options(str(key), "alice")
        assert raised.value.field == field
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", str(tmp_path / "key")], check=True)
    with pytest.raises(ConfigError, match="approver is a name the host lists"):
        ApprovalSigner.from_options(str(tmp_path / "key"), "Alice Smith")


def test_with_the_maintenance_marker_no_request_of_any_kind_changes_anything_and_the_refusal_names_it(
        host: Path, approver: ApprovalSigner, empty_host: Path, tmp_path: Path) -> None:
    """The marker is a person's word on the host, read there: a step, a read, a step a person signed and a check that
    would keep a known good copy all change nothing while it holds; the signed approval is not used up."""
    marker = empty_host / "etc" / "sentinel-heal" / "maintenance"
    marker.parent.mkdir(parents=True)
    marker.write_text("reason: swapping the disk\nby: alice\n")
    site = tmp_path / "site.conf"
    site.write_text("server { listen 80; }\n")
    declare(host, [NGINX, {"name": "site", "status_check": False, "check_command": "true", "configs": [str(site)]}])
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
    declare(host, [NGINX], mode="observe")
    rc, response, _log = execute(host, request(["df", "-h", "/"]))
    assert rc == REFUSED and response["rule"] == "observe-mode" and "observe mode: nothing changes it" in response["reason"]
    rc, response, _log = execute(host, request(["df", "-h", "/"], kind="read"))
    assert rc == 0 and response["rule"] == "filesystem-usage", response  # reads still run: they change nothing
    # the service's own mode wins over the host's
    declare(host, [dict(NGINX, mode="review")], mode="autonomous")
    rc, response, _log = execute(host, request(["df", "-h", "/"]))
    assert rc == REFUSED and response["decision"] == "allow" and "review mode: every step needs a person's approval" in response["reason"]
    rc, response, _log = execute(host, approved(approver, ["df", "-h", "/"], nonce="reviewed"))
    assert rc == 0 and response["approved_by"] == "alice", response


def test_what_the_executor_starts_gets_none_of_the_callers_environment(host: Path, tmp_path: Path) -> None:
    """Where sudo keeps PATH, root would run the caller's systemctl: the executor's children see a fixed PATH and none
    of the caller's variables (the check's command here prints what it was given)."""
    shadow = tmp_path / "bin"
    shadow.mkdir()
    (shadow / "printenv").write_text("#!/bin/sh\necho the callers printenv\n")
    (shadow / "printenv").chmod(0o755)
    declare(host, [{"name": "path", "status_check": False, "check_command": "printenv", "running_indicator": f"PATH={SAFE_PATH}\n"},
                   {"name": "planted", "status_check": False, "check_command": "printenv", "running_indicator": "HINT=planted"},
                   {"name": "sudo", "status_check": False, "check_command": "printenv", "running_indicator": "SUDO_USER=sentinel"}])
    sent = json.dumps(check_request(["path", "planted", "sudo"])).encode()
    caller = {"PYTHONPATH": str(ROOT / ".collections"), "PATH": f"{shadow}:{os.environ['PATH']}", "SUDO_USER": "sentinel",
              "LD_PRELOAD_HINT": "planted", "SYSTEMD_PAGER": "less"}
    proc = subprocess.run([sys.executable, "-c", executor(host)], input=sent, capture_output=True, timeout=60, check=False, env=caller)
    answer = json.loads(proc.stdout)
    # the host's printenv ran, with the fixed PATH; the caller's variable did not reach it, what sudo says of the caller did
    assert {service["name"]: service["healthy"] for service in answer["check"]["services"]} == {"path": True, "planted": False, "sudo": True}


def test_the_evidence_a_check_names_is_read_for_a_failing_service_as_reads_of_its_own_would_be(host: Path, empty_host: Path) -> None:
    """One request for the check and its evidence: each command judged with the host's policy in the failure's context,
    run as the host's rule says (not as the caller says), refused as its own read request would be, and said in the
    check's one decision-log entry; nothing is read for a healthy service, nor while a person's marker holds."""
    reads = [{"service": "site", "argv": ["df", "-h", "/"]}, {"service": "site", "argv": ["cat", "/etc/shadow"]},
             {"service": "site", "argv": ["systemctl", "restart", "site"]}, {"service": "up", "argv": ["df", "-h", "/"]}]
    declare(host, [{"name": "site", "status_check": False, "check_command": "false"}, {**SITE_UP, "name": "up"}])
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
