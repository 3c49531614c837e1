"""The request the executor reads on standard input, checked before anything is judged: its size, its JSON, each field
the kind of request it is (a step of a plan, a read, a check) needs. What does not hold is refused naming the field."""

from __future__ import annotations

import json
import re

from ansible_collections.sentinel.heal.plugins.module_utils._errors import SentinelError
from ansible_collections.sentinel.heal.plugins.module_utils._host.probe import MAX_LOG_LINES
from ansible_collections.sentinel.heal.plugins.module_utils._host.settle import MAX_SETTLE_S

MAX_REQUEST_BYTES = 65536
# evidence read within a check: at most so many commands
MAX_READS_AHEAD = 16
MAX_TIMEOUT = 600
_KINDS = ("step", "read", "check")
# how the controller names a run of a plan (plan_runs.py keeps one file by that name)
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,95}$")


class RequestRefused(SentinelError):
    """The executor does not run what it was asked: a malformed request, another policy version, a step its policy
    does not allow."""

    def __init__(self, message, rule, field=None, value=None, hint=None):
        self.rule = rule
        super().__init__(message, field=field, value=value, hint=hint)


def parse_request(raw):
    if len(raw) > MAX_REQUEST_BYTES:
        raise RequestRefused("the request is larger than %d bytes" % MAX_REQUEST_BYTES, "request", field="request", value=len(raw))
    try:
        request = json.loads(raw.decode("utf-8"))
    except ValueError as exc:
        raise RequestRefused("the request is not JSON", "request", field="request", value=raw[:80].decode("utf-8", "replace"),
                             hint=str(exc)) from None
    if not isinstance(request, dict):
        raise RequestRefused("the request must be a JSON object", "request", field="request", value=type(request).__name__)
    if request.get("kind") == "check":
        return _parse_check(request)
    for key, kind in (("host", str), ("service", str), ("policy_version", str), ("plan", list), ("step", int)):
        if not isinstance(request.get(key), kind) or isinstance(request.get(key), bool):
            raise RequestRefused("the request lacks %s (%s)" % (key, kind.__name__), "request", field=key, value=request.get(key))
    plan = request["plan"]
    if not 1 <= len(plan) <= 3 or not all(isinstance(step, list) and step and all(isinstance(a, str) for a in step) for step in plan):
        raise RequestRefused("plan must be 1 to 3 steps, each a list of strings", "request", field="plan", value=plan)
    if not 0 <= request["step"] < len(plan):
        raise RequestRefused("step must name one of the plan's steps", "request", field="step", value=request["step"])
    if request.get("kind", "step") not in _KINDS:
        raise RequestRefused("kind must be one of %s" % ", ".join(_KINDS), "request", field="kind", value=request.get("kind"))
    timeout = request.get("timeout", 120)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or not 1 <= timeout <= MAX_TIMEOUT:
        raise RequestRefused("timeout must be 1 to %d seconds" % MAX_TIMEOUT, "request", field="timeout", value=timeout)
    if request.get("kind", "step") == "step":
        _parse_step(request)
    return request


def _parse_step(request):
    if not (isinstance(request.get("run"), str) and _RUN_ID.match(request["run"])):
        raise RequestRefused("a step names the run of its plan it belongs to (letters, digits and ._:- only, at most 96)", "request",
                             field="run", value=request.get("run"), hint="the controller names each attempt's run of its plan")
    for key in ("failure_class", "fingerprint"):
        if not isinstance(request.get(key), str):
            raise RequestRefused("a step names the failure its plan was made for (%s, a string)" % key, "request", field=key,
                                 value=request.get(key), hint="the controller sends the incident's failure class and fingerprint")


def _parse_check(request):
    names, lines = request.get("services"), request.get("log_lines", 20)
    for key in ("host", "policy_version"):
        if not isinstance(request.get(key), str):
            raise RequestRefused("the request lacks %s (str)" % key, "request", field=key, value=request.get(key))
    if not isinstance(names, list) or not names or not all(isinstance(name, str) for name in names):
        raise RequestRefused("services must name the declared services to check", "request", field="services", value=names)
    if not isinstance(lines, int) or isinstance(lines, bool) or not 1 <= lines <= MAX_LOG_LINES:
        raise RequestRefused("log_lines must be 1 to %d" % MAX_LOG_LINES, "request", field="log_lines", value=lines)
    settle = request.get("settle_seconds", 0.0)
    if not isinstance(settle, (int, float)) or isinstance(settle, bool) or not 0 <= settle <= MAX_SETTLE_S:
        raise RequestRefused("settle_seconds must be 0 to %g seconds" % MAX_SETTLE_S, "request", field="settle_seconds", value=settle)
    secrets = request.get("redact_values", [])
    if not isinstance(secrets, list) or not all(isinstance(secret, str) for secret in secrets):
        raise RequestRefused("redact_values must be a list of strings", "request", field="redact_values", value="(not shown)")
    reads = request.get("evidence", [])
    if not isinstance(reads, list) or len(reads) > MAX_READS_AHEAD or not all(
            isinstance(read, dict) and read.get("service") in names and isinstance(read.get("argv"), list) and read["argv"]
            and all(isinstance(arg, str) for arg in read["argv"]) for read in reads):
        raise RequestRefused("evidence must be at most %d reads, each a service the check names and its argv (a list of strings)"
                             % MAX_READS_AHEAD, "request", field="evidence", value=reads if isinstance(reads, list) else type(reads).__name__)
    timeout = request.get("timeout", 120)
    if not isinstance(timeout, int) or isinstance(timeout, bool) or not 1 <= timeout <= MAX_TIMEOUT:
        raise RequestRefused("timeout must be 1 to %d seconds" % MAX_TIMEOUT, "request", field="timeout", value=timeout)
    return request
