"""The executor on the host: the last check, where the action happens.

With enforcement on the host, the healing account's only sudo rule is this program. The controller sends one request
on standard input (JSON: the host, the service, the policy version it judged with, the plan's steps as argv and which
one to run); the executor gathers the incident's context again itself, at that moment (who holds the port now, the pid
file now, the unit's own processes, who owns each component of the service's paths), judges the plan with the same
argv judge as the controller and runs the step only when its own policy says ALLOW. Ownership, mode and directory
repairs it does itself, component by component without following links. Whatever it decides goes to the host's
journal (identifier ``sentinel-heal-exec``), or to a file when the host has none.

The policy and the declared services are the host's own: root-owned files the host role wrote. Nothing the request
says changes them; a request for another policy version is refused until the role is applied again.
"""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import signal
import socket
import stat
import subprocess
import sys
import syslog
import time

from ansible_collections.sentinel.heal.plugins.module_utils import _nofollow
from ansible_collections.sentinel.heal.plugins.module_utils._errors import SentinelError
from ansible_collections.sentinel.heal.plugins.module_utils._host_approval import APPROVERS_FILE, USED_DIR, ApprovalRefused, verify_approval
from ansible_collections.sentinel.heal.plugins.module_utils._judge import KNOWN_GOOD_SETTINGS, Decision, judge_steps, split_options
from ansible_collections.sentinel.heal.plugins.module_utils._judge_context import PolicyContext, running_unit
from ansible_collections.sentinel.heal.plugins.module_utils._known_good import configuration_test, restore_step
from ansible_collections.sentinel.heal.plugins.module_utils._policy_language import policy_from_document
from ansible_collections.sentinel.heal.plugins.module_utils._probe import (
    MAX_LOG_LINES,
    SERVICE_OPTIONS,
    ProbeConfigError,
    check_services,
    detect_service_manager,
    evidence_of,
)
from ansible_collections.sentinel.heal.plugins.module_utils._redact import redact

CONFIG_DIR = "/etc/sentinel-heal"
# where the host role installs the executor: the healing account's one sudo rule
EXECUTOR_PATH = "/usr/libexec/sentinel-heal/exec"
LOG_IDENTIFIER = "sentinel-heal-exec"
LOG_FILE = "/var/log/sentinel-heal/exec.log"
MAX_REQUEST_BYTES = 65536
MAX_OUTPUT_BYTES = 16384
MAX_TIMEOUT = 600
# what a refusal exits with (EX_NOPERM): the controller tells it from a step that ran and failed
REFUSED = 77
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
_KINDS = ("step", "read", "check")
# what sudo passes on when the controller's side goes away (the job killed, its timeout, the session hung up)
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


class RequestRefused(SentinelError):
    """The executor does not run what it was asked: a malformed request, another policy version, a step its policy
    does not allow."""

    def __init__(self, message, rule, field=None, value=None, hint=None):
        self.rule = rule
        super().__init__(message, field=field, value=value, hint=hint)


class _Incident(object):
    """What PolicyContext.from_failure reads, gathered here."""

    def __init__(self, name, spec, evidence, manager):
        self.service = name
        self.init_service = spec.get("service") or name
        self.spec = spec
        self.evidence = evidence
        self.unit = running_unit(evidence, manager)


def main(config_dir=CONFIG_DIR, log_file=LOG_FILE, approvals_dir=USED_DIR):
    """Read one request from standard input, decide, run, log; the exit status is the step's, or REFUSED."""
    raw = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
    caller = os.environ.get("SUDO_USER") or pwd.getpwuid(os.getuid()).pw_name
    request = {}
    try:
        request = _parse_request(raw)
        response = check(request, config_dir) if request.get("kind") == "check" else handle(request, config_dir, approvals_dir)
    except RequestRefused as exc:
        response = dict(refused=True, decision=Decision.BLOCK.value, rule=exc.rule, reason=exc.describe())
    except Exception as exc:  # noqa: BLE001 - the controller reads JSON, and a person never a traceback: nothing ran
        response = dict(refused=True, decision=Decision.BLOCK.value, rule="executor-error",
                        reason="the executor could not decide (%s: %s); nothing ran" % (type(exc).__name__, exc))
    record_decision(caller, request, response, log_file)
    sys.stdout.write(json.dumps(response, sort_keys=True) + "\n")
    return REFUSED if response.get("refused") else int(response.get("rc", 0))


def _parse_request(raw):
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
    return request


def _parse_check(request):
    names, lines = request.get("services"), request.get("log_lines", 20)
    for key in ("host", "policy_version"):
        if not isinstance(request.get(key), str):
            raise RequestRefused("the request lacks %s (str)" % key, "request", field=key, value=request.get(key))
    if not isinstance(names, list) or not names or not all(isinstance(name, str) for name in names):
        raise RequestRefused("services must name the declared services to check", "request", field="services", value=names)
    if not isinstance(lines, int) or isinstance(lines, bool) or not 1 <= lines <= MAX_LOG_LINES:
        raise RequestRefused("log_lines must be 1 to %d" % MAX_LOG_LINES, "request", field="log_lines", value=lines)
    if not isinstance(request.get("keep_known_good", False), bool):
        raise RequestRefused("keep_known_good must be true or false", "request", field="keep_known_good", value=request.get("keep_known_good"))
    secrets = request.get("redact_values", [])
    if not isinstance(secrets, list) or not all(isinstance(secret, str) for secret in secrets):
        raise RequestRefused("redact_values must be a list of strings", "request", field="redact_values", value="(not shown)")
    return request


def check(request, config_dir=CONFIG_DIR):
    """service_check as root on the host, of services the host declares, as it declares them: the request chooses which,
    never what is read for them."""
    _enforced_policy(request, config_dir)
    declared = dict((spec.get("name"), spec) for spec in _load_json(os.path.join(config_dir, "services.json")).get("services") or [])
    unknown = [name for name in request["services"] if name not in declared]
    if unknown:
        raise RequestRefused("%s: not a service this host declares" % ", ".join(unknown), "undeclared-service", field="services",
                             value=unknown, hint="declare it in autoheal_services and apply the sentinel.heal.host role")
    params = dict(services=[_with_defaults(declared[name], SERVICE_OPTIONS) for name in request["services"]],
                  log_lines=request.get("log_lines", 20), redact_values=request.get("redact_values") or [])
    try:
        return dict(refused=False, rc=0, decision=Decision.ALLOW.value, rule="check", reason="service_check of declared services",
                    check=check_services(params, keep_known_good=request.get("keep_known_good") is True))
    except ProbeConfigError as exc:
        raise RequestRefused("the host's declared services cannot be checked: %s" % exc, "host-configuration", field="services",
                             value=request["services"], hint="fix autoheal_services and apply the sentinel.heal.host role") from None


def _with_defaults(spec, options):
    """A declared service as the module's argument spec would give it: every option, defaults filled in (the executor
    runs without Ansible on the host, so not by Ansible's argument spec validator)."""
    filled = {}
    for name, option in options.items():
        value = spec.get(name, option.get("default"))
        if value is not None and option.get("options"):
            value = _with_defaults(value, option["options"])
        filled[name] = value
    return filled


def check_through_executor(params, keep_known_good=False):
    """service_check's result for the declared services ``params`` names, read as root by the executor on the host
    (the module's way with enforcement on the host: the healing account's one sudo rule is the executor)."""
    if params.get("evidence_commands"):
        raise ProbeConfigError("evidence_commands: with through_executor, evidence is read through the executor step by step, not in the check")
    answer = ask(dict(host=socket.gethostname(), kind="check", services=[spec["name"] for spec in params["services"]],
                      policy_version=params["policy_version"], log_lines=params["log_lines"],
                      redact_values=params.get("redact_values") or [], keep_known_good=keep_known_good))
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
                               % _text(completed.stderr or completed.stdout).strip())
    return answer


def handle(request, config_dir=CONFIG_DIR, approvals_dir=USED_DIR):
    """Judge the request's plan in the context gathered now, and run its step when the host's policy allows it."""
    policy = _enforced_policy(request, config_dir)
    services = _load_json(os.path.join(config_dir, "services.json"))
    spec = next((s for s in services.get("services") or [] if s.get("name") == request["service"]), None)
    if spec is None:
        raise RequestRefused("%s is not a service this host declares" % request["service"], "undeclared-service", field="service",
                             value=request["service"], hint="declare it in autoheal_services and apply the sentinel.heal.host role")
    # the host's own setting for services that do not say (sentinel.heal.host's host_restore_known_good)
    spec = dict(spec, restore_known_good=spec.get("restore_known_good") or services.get("restore_known_good") or "approve")
    manager = detect_service_manager()
    others = [other for other in services.get("services") or [] if other.get("name") != spec["name"]]
    incident = _Incident(spec["name"], spec, evidence_of(spec, manager, others=others), manager)
    context = PolicyContext.from_failure(incident, services.get("probe_hosts") or ())
    verdicts, _decision = judge_steps(request["plan"], context, policy)
    verdict = verdicts[request["step"]]
    response = dict(refused=False, decision=verdict.decision.value, rule=verdict.rule, reason=verdict.reason,
                    policy_version=policy.version, argv=list(verdict.argv))
    if verdict.decision is Decision.APPROVE and "approval" in request:
        response["approved_by"] = _approved_by(request, services, config_dir, approvals_dir)
    elif verdict.decision is not Decision.ALLOW:
        needs = " (with a person's approval signed by a key the host lists)" if verdict.decision is Decision.APPROVE else ""
        response.update(refused=True, reason="this host's policy says %s%s: %s" % (verdict.decision.value, needs, verdict.reason))
        return response
    # none for a step no rule knows, which a person approved
    rule = next((rule for rule in policy.rules if rule.id == verdict.rule), None)
    if request.get("kind", "step") == "read" and not (rule and rule.read_only):
        response.update(refused=True, reason="asked as a read, but %s changes things" % verdict.rule)
        return response
    started = time.time()
    if rule and rule.restores in KNOWN_GOOD_SETTINGS:
        response.update(_restore_known_good(spec, verdict.argv))
    elif rule and rule.restores:
        response.update(_repair(rule, verdict.argv, context, policy))
    else:
        response.update(_run(verdict.argv, verdict.become, request.get("timeout", 120)))
    response["seconds"] = round(time.time() - started, 3)
    return response


def _approved_by(request, services, config_dir, approvals_dir):
    """The approver whose signature the request carries, checked here (the controller's word is not enough)."""
    approvers = os.path.join(config_dir, APPROVERS_FILE)
    try:
        return verify_approval(request["approval"], request, services.get("host"),
                               _read_host_file(approvers).decode("utf-8") if os.path.lexists(approvers) else "", approvals_dir)
    except ApprovalRefused as exc:
        raise RequestRefused("a person's approval is needed and the one sent does not hold: %s" % exc.message, "approval", field=exc.field,
                             value=exc.value, hint=exc.hint) from None


def _enforced_policy(request, config_dir):
    """The host's policy, when it is the one the controller judges with: until the role installs that one, nothing is
    done for the controller (a check included)."""
    policy = load_host_policy(config_dir)
    if request["policy_version"] != policy.version:
        raise RequestRefused(
            "the controller judged with policy %s, this host enforces %s" % (request["policy_version"], policy.version), "policy-version",
            field="policy_version", value=request["policy_version"],
            hint="apply the sentinel.heal.host role to this host again, with the policy the controller uses")
    return policy


def load_host_policy(config_dir=CONFIG_DIR):
    """The policy the host role installed (root-owned, not writable by others: anything else is not the host's)."""
    path = os.path.join(config_dir, "policy.json")
    return policy_from_document(_load_json(path))


def _load_json(path):
    try:
        return json.loads(_read_host_file(path).decode("utf-8"))
    except ValueError as exc:
        raise RequestRefused("%s is not JSON" % path, "host-configuration", field="file", value=path, hint=str(exc)) from None


def _read_host_file(path):
    """A file the host role wrote: root-owned, only root may write it, no link."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
    except OSError as exc:
        raise RequestRefused("cannot read %s: %s" % (path, exc.strerror), "host-configuration", field="file", value=path,
                             hint="apply the sentinel.heal.host role to this host") from None
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if info.st_uid != 0 or info.st_mode & (stat.S_IWGRP | stat.S_IWOTH) or not stat.S_ISREG(info.st_mode):
            raise RequestRefused("%s is not a root-owned file only root may write" % path, "host-configuration", field="file", value=path,
                                 hint="apply the sentinel.heal.host role to this host")
        return handle.read()


def _run(argv, become, timeout):
    """Run the argv without a shell, as root when the rule says so and as the calling account otherwise. The step and
    what it starts in its process group are stopped whole at the timeout or when the executor is told to stop (the
    controller's job was killed, its timeout ran out), as sudo stops a command run directly."""
    demote = None if become else _as_caller()
    try:
        child = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=dict(PATH=SAFE_PATH, LANG="C.UTF-8"), cwd="/", preexec_fn=demote, start_new_session=True)
    except OSError as exc:
        return dict(rc=127, stdout="", stderr="cannot run %s: %s" % (argv[0], exc.strerror))

    def stop(signum, _frame):
        _kill_group(child.pid)
    for signum in _STOP_SIGNALS:
        signal.signal(signum, stop)
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(child.pid)
        child.communicate()
        return dict(rc=124, stdout="", stderr="killed on the host at its timeout of %d s" % timeout)
    # redacted here, before the answer leaves the host: a unit's Environment= values, tokens, keys
    return dict(rc=child.returncode, stdout=redact(_text(stdout)), stderr=redact(_text(stderr)))


def _kill_group(pid):
    with contextlib.suppress(OSError):  # gone already
        os.killpg(pid, signal.SIGKILL)


def _as_caller():
    uid, gid = int(os.environ.get("SUDO_UID", "65534")), int(os.environ.get("SUDO_GID", "65534"))

    def demote():
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    return demote


def _text(data):
    return data[:MAX_OUTPUT_BYTES].decode("utf-8", "replace")


def _repair(rule, argv, context, policy):
    """Ownership, mode and directory repairs, done here without following a link at any component: what the judge
    allowed on the paths it saw is what changes, whatever was swapped in since."""
    operands, options = split_options(argv[1:], rule.options or {}, context, policy)
    try:
        if rule.restores == "ownership":
            owner, _colon, group = operands[0].partition(":")
            uid, gid = pwd.getpwnam(owner).pw_uid, grp.getgrnam(group).gr_gid if group else -1
            notes = [_nofollow.change_owner(path, uid, gid, recursive="-R" in options) for path in operands[1:]]
        elif rule.restores == "mode":
            notes = [_nofollow.change_mode(path, int(operands[0], 8)) for path in operands[1:]]
        else:
            uid, gid = pwd.getpwnam(options.get("-o") or "root").pw_uid, grp.getgrnam(options.get("-g") or "root").gr_gid
            notes = [_nofollow.make_directory(path, uid, gid, int(options.get("-m") or "0755", 8)) for path in operands]
    except _nofollow.NoFollowRefused as exc:
        return dict(rc=1, stdout="", stderr=str(exc))
    except KeyError as exc:
        return dict(rc=1, stdout="", stderr="no such account or group: %s" % exc)
    return dict(rc=0, stdout=json.dumps(notes, sort_keys=True, default=str), stderr="")


def _restore_known_good(spec, argv):
    """sentinel-heal-restore FILE SHA256, as the judge bound it to the incident's changed file and its kept copy: put
    back here, the current version kept aside, the service's configuration test run and the restore undone if it
    fails (:func:`restore_step`)."""
    return restore_step(spec["name"], argv[1], argv[2], test_argv=configuration_test(spec))


def record_decision(caller, request, response, log_file=LOG_FILE):
    """One line per request to the journal (or the log file): who asked, what, the decision, its rule, the status."""
    entry = dict(caller=caller, host=request.get("host"), service=request.get("service"), policy_version=request.get("policy_version"),
                 step=response.get("argv") or _requested_step(request),
                 decision="refused" if response.get("refused") else response.get("decision"), rule=response.get("rule"),
                 reason=response.get("reason"), rc=response.get("rc"))
    if response.get("approved_by"):
        entry["approved_by"] = response["approved_by"]
    line = json.dumps(entry, sort_keys=True)
    if _has_journal():
        syslog.openlog(LOG_IDENTIFIER, syslog.LOG_PID, syslog.LOG_AUTHPRIV)
        syslog.syslog(syslog.LOG_WARNING if response.get("refused") else syslog.LOG_NOTICE, line)
        syslog.closelog()
        return
    os.makedirs(os.path.dirname(log_file), mode=0o700, exist_ok=True)
    fd = os.open(log_file, os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    with os.fdopen(fd, "a") as handle:
        handle.write("%s %s\n" % (time.strftime("%Y-%m-%dT%H:%M:%S%z"), line))


def _requested_step(request):
    if request.get("kind") == "check" and isinstance(request.get("services"), list):
        return ["service_check"] + [str(name) for name in request["services"]]
    plan, index = request.get("plan"), request.get("step")
    if isinstance(plan, list) and isinstance(index, int) and not isinstance(index, bool) and 0 <= index < len(plan):
        return plan[index]
    return None


def _has_journal():
    try:
        return stat.S_ISSOCK(os.stat("/run/systemd/journal/dev-log").st_mode)
    except OSError:
        return False
