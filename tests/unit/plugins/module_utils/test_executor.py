"""The executor on the host, run as the host runs it: a process reading one request on standard input, with the
host's policy and declared services in a root-owned directory. This machine is the host here (no lab): the context is
what the executor reads on it, the decision log the file it writes where there is no journal."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import pytest

from ansible_collections.sentinel.heal.plugins.module_utils._executor import REFUSED
from ansible_collections.sentinel.heal.plugins.plugin_utils.policy import host_policy_document, load_policy

ROOT = Path(__file__).resolve().parents[4]
NGINX = {"name": "nginx", "ports": [80], "process": "nginx", "pidfile": "/run/nginx.pid", "logs": ["/var/log/nginx/error.log"]}


@pytest.fixture
def host(tmp_path: Path) -> Path:
    """The configuration the host role writes: the controller's policy document and the declared services."""
    config = tmp_path / "etc"
    config.mkdir()
    (config / "policy.json").write_text(json.dumps(host_policy_document()))
    (config / "services.json").write_text(json.dumps({"services": [NGINX], "probe_hosts": ["node1"]}))
    return config


def execute(config: Path, request: Any) -> tuple[int, dict[str, Any], list[dict[str, Any]]]:
    """The exit status, the response and the decision log of one request."""
    log = config.parent / "log" / "exec.log"
    program = ("import sys; from ansible_collections.sentinel.heal.plugins.module_utils._executor import main; "
               f"sys.exit(main({str(config)!r}, {str(log)!r}))")
    raw = request if isinstance(request, bytes) else json.dumps(request).encode()
    proc = subprocess.run([sys.executable, "-c", program], input=raw, capture_output=True, timeout=60, check=False,
                          env={"PYTHONPATH": str(ROOT / ".collections"), "PATH": os.environ["PATH"], "SUDO_USER": "sentinel"})
    assert proc.stderr == b"", proc.stderr.decode()
    lines = [json.loads(line.split(" ", 1)[1]) for line in log.read_text().splitlines()] if log.exists() else []
    return proc.returncode, json.loads(proc.stdout), lines


def request(*steps: list[str], step: int = 0, **fields: Any) -> dict[str, Any]:
    return {"host": "node1", "service": "nginx", "policy_version": load_policy().version, "plan": list(steps), "step": step, **fields}


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
    rc, response, log = execute(host, {"host": "node1", "kind": "check", "services": ["nginx"], "log_lines": 5})
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
    rc, response, _log = execute(host, {"host": "node1", "kind": "check", "services": services})
    assert rc == REFUSED and response["rule"] == rule


def test_a_policy_document_that_is_not_one_refuses_with_its_reason_not_a_traceback(host: Path) -> None:
    (host / "policy.json").write_text(json.dumps({"layers": "none"}))
    rc, response, log = execute(host, request(["df", "-h", "/"]))
    assert rc == REFUSED and response["rule"] == "executor-error"
    assert "a policy document has a version" in response["reason"] and "Traceback" not in response["reason"]
    assert log[0]["decision"] == "refused"
