"""The executor asked from the calling account's side, through sudo: what the service_check module does with
enforcement on the host, where the healing account's one sudo rule is the executor."""

from __future__ import annotations

import json
import socket
import subprocess

from ansible_collections.sentinel.heal.plugins.module_utils._host.host_configuration import EXECUTOR_PATH
from ansible_collections.sentinel.heal.plugins.module_utils._host.probe import ProbeConfigError
from ansible_collections.sentinel.heal.plugins.module_utils._host.requests import MAX_TIMEOUT
from ansible_collections.sentinel.heal.plugins.module_utils._host.step_running import output_text


def check_through_executor(params):
    """service_check's result for the declared services ``params`` names, read as root by the executor on the host
    (the module's way with enforcement on the host: the healing account's one sudo rule is the executor)."""
    answer = ask(dict(host=socket.gethostname(), kind="check", services=[spec["name"] for spec in params["services"]],
                      policy_version=params["policy_version"], log_lines=params["log_lines"],
                      settle_seconds=params.get("settle_seconds") or 0.0,
                      redact_values=params.get("redact_values") or [], timeout=params.get("evidence_timeout", 120),
                      # run as the host's policy says, not as the controller's become says
                      evidence=[dict(service=read["service"], argv=read["argv"]) for read in params.get("evidence_commands") or []]))
    if answer.get("refused"):
        raise ProbeConfigError("the executor on the host refused the check (%s): %s" % (answer.get("rule"), answer.get("reason")))
    return answer["check"]


def ask(request, executor=None):
    """The executor's answer to a request, asked through sudo as the calling account (what the service_check module
    does with enforcement on the host)."""
    try:
        completed = subprocess.run(["sudo", "-n", executor or EXECUTOR_PATH], input=json.dumps(request).encode("utf-8"), stdout=subprocess.PIPE,
                                   stderr=subprocess.PIPE, check=False, timeout=MAX_TIMEOUT)
    except subprocess.TimeoutExpired:
        raise ProbeConfigError("the executor on the host did not answer within %d seconds" % MAX_TIMEOUT) from None
    try:
        answer = json.loads(completed.stdout.decode("utf-8"))
    except ValueError:
        answer = None
    if not isinstance(answer, dict):
        raise ProbeConfigError("the executor on the host did not answer (%s); apply the sentinel.heal.host role to this host (playbooks/host.yml)"
                               % output_text(completed.stderr or completed.stdout).strip())
    return answer
