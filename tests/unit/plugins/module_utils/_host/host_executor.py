"""What the executor's tests share: the executor run as the host runs it (a process reading one request on standard
input, with the host's policy and declared services in a directory of the test's own), and the requests they send
it. This machine is the host here (no lab), with the packages, init scripts and /etc of an empty host of the test's
own (tests/empty_host.py)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import uuid
from pathlib import Path
from typing import Any

from empty_host import in_python

from ansible_collections.sentinel.heal.plugins.module_utils._host import probe as _probe
from ansible_collections.sentinel.heal.plugins.module_utils._host.host_configuration import with_defaults
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.host_approval import ApprovalSigner
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import load_policy

ROOT = Path(__file__).resolve().parents[5]
NGINX = {"name": "nginx", "ports": [80], "process": "nginx", "pidfile": "/run/nginx.pid", "logs": ["/var/log/nginx/error.log"]}


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
    checked = spec and _probe.check_one(with_defaults(spec, _probe.SERVICE_OPTIONS), _probe.detect_service_manager(), 1,
                                        [other for other in services if other is not spec])
    return {"failure_class": "" if not checked or checked["healthy"] else checked["failure_class"], "fingerprint": "0" * 32}


def request(*steps: list[str], step: int = 0, **fields: Any) -> dict[str, Any]:
    """A step of a plan, in a run of its own unless ``run`` says which."""
    return {"host": "node1", "service": "nginx", "policy_version": load_policy().version, "plan": list(steps), "step": step,
            "run": f"run-{uuid.uuid4().hex}", **fields}


def check_request(services: Any, **fields: Any) -> dict[str, Any]:
    return {"host": "node1", "kind": "check", "services": services, "policy_version": load_policy().version, **fields}


SITE_UP = {"name": "site", "status_check": False, "check_command": "true"}


# a command the policy does not know: it goes to a person (default-approve), and runs harmlessly here
NEEDS_A_PERSON = ["echo", "approved"]


def approved(signer: ApprovalSigner, *steps: list[str], host_name: str = "node1", nonce: str = "plan-1", now: float | None = None,
             **fields: Any) -> dict[str, Any]:
    approval = signer.sign(host_name, "nginx", steps, nonce=nonce, now=time.time() if now is None else now)
    return request(*steps, approval=approval, **fields)


def declare(config: Path, services: list[dict[str, Any]], **host: Any) -> None:
    (config / "services.json").write_text(json.dumps({"host": "node1", "services": services, "probe_hosts": ["node1"], **host}))
