"""The executor on the host: the last check, where the action happens.

With enforcement on the host, the healing account's only sudo rule is this program. The controller sends one request
on standard input (JSON: the host, the service, the policy version it judged with, the plan's steps as argv and which
one to run); the executor gathers the incident's context again itself, at that moment (who holds the port now, the pid
file now, the unit's own processes, who owns each component of the service's paths), judges the plan with the same
argv judge as the controller and runs the step only when its own policy says ALLOW. Ownership, mode and directory
repairs it does itself, component by component without following links (so a directory a service account owns on
the way does not send them to a person, as it does where the command itself runs); a read run as root whose path another account
than root could redirect (a link on the way, an entry or a writable directory not root's) it refuses rather than runs,
since the program would follow whatever is put there. Whatever it decides goes to the host's
journal (identifier ``sentinel-heal-exec``), or to a file when the host has none.

The policy and the declared services are the host's own: root-owned files the host role wrote. Nothing the request
says changes them; a request for another policy version is refused until the role is applied again.
"""

from __future__ import annotations

import contextlib
import errno
import fcntl
import grp
import json
import os
import pwd
import re
import signal
import socket
import stat
import subprocess
import sys
import syslog
import time

from ansible_collections.sentinel.heal.plugins.module_utils._configuration_tests import configuration_test
from ansible_collections.sentinel.heal.plugins.module_utils._errors import SentinelError
from ansible_collections.sentinel.heal.plugins.module_utils._guard.approvals import APPROVERS_FILE, USED_DIR, ApprovalRefused, verify_approval
from ansible_collections.sentinel.heal.plugins.module_utils._guard.context import PolicyContext, running_unit
from ansible_collections.sentinel.heal.plugins.module_utils._guard.judge import KNOWN_GOOD_SETTINGS, Decision, judge_argv, judge_plan, split_options
from ansible_collections.sentinel.heal.plugins.module_utils._guard.policy_language import policy_from_document
from ansible_collections.sentinel.heal.plugins.module_utils._guard.redact import redact
from ansible_collections.sentinel.heal.plugins.module_utils._host import nofollow as _nofollow
from ansible_collections.sentinel.heal.plugins.module_utils._host.known_good import restore_step
from ansible_collections.sentinel.heal.plugins.module_utils._host.maintenance import marker_holds, read_marker
from ansible_collections.sentinel.heal.plugins.module_utils._host.probe import (
    MAX_LOG_LINES,
    NOT_READ_FOR,
    SERVICE_OPTIONS,
    ProbeConfigError,
    check_one,
    check_services,
    detect_service_manager,
    evidence_of,
)
from ansible_collections.sentinel.heal.plugins.module_utils._host.settle import MAX_SETTLE_S
from ansible_collections.sentinel.heal.plugins.module_utils._host.sudo_rules import other_sudo_rules
from ansible_collections.sentinel.heal.plugins.module_utils._text import clip

CONFIG_DIR = "/etc/sentinel-heal"
# where the host role installs the executor: the healing account's one sudo rule
EXECUTOR_PATH = "/usr/libexec/sentinel-heal/exec"
# that rule as sudo -l prints it (the host role writes it)
EXECUTOR_RULE = '(root) NOPASSWD: %s ""' % EXECUTOR_PATH
LOG_IDENTIFIER = "sentinel-heal-exec"
LOG_FILE = "/var/log/sentinel-heal/exec.log"
MAX_REQUEST_BYTES = 65536
MAX_OUTPUT_BYTES = 16384
# evidence read within a check: at most so many commands, each answer cut to what the module's own check keeps
MAX_READS_AHEAD = 16
READ_OUTPUT_LIMIT = 4000
MAX_TIMEOUT = 600
# what a refusal exits with (EX_NOPERM): the controller tells it from a step that ran and failed
REFUSED = 77
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# what sudo itself sets for the executor (who called it): all of the caller's environment the executor keeps
_FROM_SUDO = ("SUDO_USER", "SUDO_UID", "SUDO_GID")
# one decision-log entry at most (the request's fields cut to fit, and counted), and at most so many entries per
# caller and minute: more are counted and said in one entry ("N requests suppressed"), not written one by one
MAX_LOG_ENTRY_BYTES = 4096
MAX_LOG_FIELD_CHARS = 512
MAX_LOG_ARGS = 16
LOG_RATE = 60
LOG_RATE_WINDOW_S = 60
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
    clean_environment()
    raw = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
    caller = os.environ.get("SUDO_USER") or pwd.getpwuid(os.getuid()).pw_name
    request = {}
    try:
        request = _parse_request(raw)
        response = check(request, config_dir, approvals_dir) if request.get("kind") == "check" else handle(request, config_dir, approvals_dir)
    except RequestRefused as exc:
        response = dict(refused=True, decision=Decision.BLOCK.value, rule=exc.rule, reason=exc.describe())
    except Exception as exc:  # noqa: BLE001 - the controller reads JSON, and a person never a traceback: nothing ran
        response = dict(refused=True, decision=Decision.BLOCK.value, rule="executor-error",
                        reason="the executor could not decide (%s: %s); nothing ran" % (type(exc).__name__, exc))
    record_decision(caller, request, response, log_file, os.path.join(os.path.dirname(approvals_dir), "decisions"))
    sys.stdout.write(json.dumps(response, sort_keys=True) + "\n")
    return REFUSED if response.get("refused") else int(response.get("rc", 0))


def clean_environment():
    """Nothing of the caller's environment reaches what the executor starts (evidence, configuration tests, steps):
    where sudo keeps PATH, root would otherwise run the caller's systemctl. Only what sudo sets about the caller stays."""
    kept = dict((name, os.environ[name]) for name in _FROM_SUDO if name in os.environ)
    os.environ.clear()
    os.environ.update(kept, PATH=SAFE_PATH, LANG="C.UTF-8", HOME="/root")


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


def check(request, config_dir=CONFIG_DIR, approvals_dir=USED_DIR):
    """service_check as root on the host, of services the host declares, as it declares them: the request chooses which,
    never what is read for them. The evidence it asks to be read for a service the check finds failing is judged here,
    each command as a read request of its own would be (:func:`_read_ahead`)."""
    policy = _enforced_policy(request, config_dir)
    services = _load_json(os.path.join(config_dir, "services.json"))
    declared = dict((spec.get("name"), spec) for spec in services.get("services") or [])
    unknown = [name for name in request["services"] if name not in declared]
    if unknown:
        raise RequestRefused("%s: not a service this host declares" % ", ".join(unknown), "undeclared-service", field="services",
                             value=unknown, hint="declare it in autoheal_services and apply the sentinel.heal.host role")
    # each spec with the host's own restore setting filled in: the controller plans a restore within it (a restore the
    # host sends to a person is an approval request, never a refusal)
    params = dict(services=[_with_defaults(_as_the_host_declares(declared[name], services), SERVICE_OPTIONS) for name in request["services"]],
                  log_lines=request.get("log_lines", 20), redact_values=request.get("redact_values") or [],
                  settle_seconds=request.get("settle_seconds", 0.0))
    marker, now = read_marker(), time.time()
    # what counts as good is the host's to say, never the caller's: every check keeps a healthy service's configuration
    # (the caller cannot hold an older copy as good by not asking), and none in maintenance (what a person is in the
    # middle of is not good yet)
    keep = not any(marker_holds(marker, name, now) for name in request["services"])
    try:
        checked = check_services(params, keep_known_good=keep)
    except ProbeConfigError as exc:
        raise RequestRefused("the host's declared services cannot be checked: %s" % exc, "host-configuration", field="services",
                             value=request["services"], hint="fix autoheal_services and apply the sentinel.heal.host role") from None
    # a person's maintenance marker, whatever it covers, holds the reads back too (as the module's own check does)
    reads = _read_ahead(request, checked, services, policy, (config_dir, approvals_dir)) if marker is None else []
    # a plan this host began and nobody finished: visible to the run that checks next
    checked["facts"]["unfinished_plans"] = unfinished_runs(approvals_dir, request["services"], now)
    # whether the executor is all the caller may run as root: otherwise the host runs without enforcement
    others = other_sudo_rules(os.environ.get("SUDO_USER") or "root", EXECUTOR_RULE)
    checked["facts"]["enforcement"] = dict(enforced=not others, other_rules=[other["rule"] for other in others])
    return dict(refused=False, rc=0, decision=Decision.ALLOW.value, rule="check", reason="service_check of declared services",
                check=checked, reads=reads)


def _read_ahead(request, checked, services, policy, places):
    """Read the evidence the request names for each service the check found failing, in the check's one request (an
    incident's evidence then costs no request of its own): each command judged with the host's policy in the context of
    the failure just found, and run or refused exactly as a read request for it would be. The answers go into the
    failure's ``evidence.commands`` as the module's own check puts them; what was decided, for the decision log."""
    wanted = {}
    for read in request.get("evidence") or []:
        wanted.setdefault(read["service"], []).append(read["argv"])
    declared = dict((spec.get("name"), spec) for spec in services.get("services") or [])
    manager, decided = checked["facts"]["service_manager"], []
    for failure in checked["failures"]:
        if not wanted.get(failure["name"]) or failure["failure_class"] in NOT_READ_FOR:
            continue
        spec = _as_the_host_declares(declared[failure["name"]], services)
        context = _context_now(spec, services, manager, failure)
        answers = []
        for argv in wanted[failure["name"]]:
            [verdict], _decision = judge_plan([judge_argv(argv, context, policy)], context)
            started = time.time()
            said = _decide_and_run(dict(kind="read", timeout=request.get("timeout", 120)), verdict, spec, services, context, policy, places)
            output = "\n".join(part for part in (said.get("stdout"), said.get("stderr")) if part) if not said["refused"] else \
                "refused by the host's executor (%s): %s" % (said["rule"], said["reason"])
            answers.append(dict(argv=list(argv), become=verdict.become, rc=None if said["refused"] else said.get("rc"),
                                output=redact(clip(output, READ_OUTPUT_LIMIT, keep="middle"), request.get("redact_values") or ()),
                                duration=round(time.time() - started, 3)))
            decided.append(dict(argv=list(argv), decision="refused" if said["refused"] else said["decision"], rule=said["rule"]))
        failure["evidence"]["commands"] = answers
    return decided


def _as_the_host_declares(spec, services):
    """A declared service with the host's own setting for what it leaves unsaid (sentinel.heal.host's host_restore_known_good)."""
    return dict(spec, restore_known_good=spec.get("restore_known_good") or services.get("restore_known_good") or "approve")


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
    spec = _as_the_host_declares(spec, services)
    kind = request.get("kind", "step")
    _refuse_when_a_person_said_so(spec, services, kind)
    manager = detect_service_manager()
    # a step's: the host's own check, whose evidence is the context too while the service fails
    checked = check_one(_with_defaults(spec, SERVICE_OPTIONS), manager, 1, _others(spec, services)) if kind == "step" else {}
    context = _context_now(spec, services, manager, checked)
    # each step judged once; the plan's own rules then over the whole plan and, for a run, over its pieces
    judged = [judge_argv(step, context, policy) for step in request["plan"]]
    verdicts, _decision = judge_plan(judged, context)
    if checked:
        return _run_in_plan(request, (judged, verdicts), spec, services, (context, checked), policy, (config_dir, approvals_dir))
    return _decide_and_run(request, verdicts[request["step"]], spec, services, context, policy, (config_dir, approvals_dir))


def _others(spec, services):
    return [other for other in services.get("services") or [] if other.get("name") != spec["name"]]


def _context_now(spec, services, manager, checked=None):
    """The incident's context as the host is now: the evidence of its check (``checked``: check_one's result, or one
    failure of check_services') when it has one, else read."""
    evidence = (checked or {}).get("evidence") or evidence_of(spec, manager, others=_others(spec, services))
    # the repairs the policy allows are done here, without following a link (_repair): none can be redirected
    return PolicyContext.from_failure(_Incident(spec["name"], spec, evidence, manager), services.get("probe_hosts") or (),
                                      repairs_without_following_links=True)


# the classes one failure of a stopped service passes through between the controller's check and a step (a crash loop
# is not_running, then auto_restart, then restart_loop; a killed server leaves its pid file behind): the same failure
DOWN_CLASSES = frozenset(("not_running", "auto_restart", "restart_loop", "start_limit_hit", "stale_pidfile", "stale_socket"))


def _hold_to_the_failure(checked, request):
    """Refuse a plan's first step unless the host's own check (``checked``) finds the service failing in the way the
    request says its plan was made for (its failure class, or another of the same stopped service's). The fingerprint is
    not compared: the service's own words change while it crash-loops (its journal's cause repeated, systemd's count of
    restarts)."""
    name = checked["name"]
    if checked["healthy"]:
        raise RequestRefused("%s is healthy on this host (%s): a plan for a failure does not run on it unattended"
                             % (name, "; ".join(check["detail"] for check in checked["checks"]) or "nothing to check"),
                             "service-healthy", field="service", value=name, hint="a step on a healthy service runs only with a person's approval")
    here, claimed = checked["failure_class"], request.get("failure_class")
    if here != claimed and not {here, claimed} <= DOWN_CLASSES:
        raise RequestRefused("%s fails on this host otherwise than its plan was made for: %s here (%s), the plan is for %s"
                             % (name, here, checked["summary"], claimed), "incident-changed", field="failure_class", value=claimed,
                             hint="check the service again and plan for the failure it has now")


def _run_in_plan(request, judgement, spec, services, incident, policy, places):
    """A step of a plan, run only as part of that plan (its progress kept here, root only, under the request's ``run``):
    in order, once, and never a piece the plan's own rules would not allow alone. A step whose plan-level rule holds
    only with later steps (a stop that its plan's start undoes) runs here with those steps, in one request: a plan cut
    into pieces leaves no service stopped. A step that already ran answers what it did, without running again. The
    run's first step runs only while the service fails here as the plan was made for, unless a person approved it."""
    plan, index = request["plan"], request["step"]
    judged, verdicts = judgement
    context, checked = incident
    if verdicts[index].decision is Decision.BLOCK:  # refused whenever it comes, in order or not
        return _decide_and_run(request, verdicts[index], spec, services, context, policy, places)
    with _PlanRun(_runs_dir(places[1]), request["run"], spec["name"], plan) as run:
        if index in run.answers:
            return dict(run.answers[index], ran_before=True)
        if index != len(run.answers):
            raise RequestRefused("step %d of run %s comes before step %d of its plan has run: steps run in order, once each"
                                 % (index + 1, request["run"], len(run.answers) + 1), "plan-order", field="step", value=index,
                                 hint="send the plan's steps in order, each once, under one run")
        if not run.answers and "approval" not in request:
            _hold_to_the_failure(checked, request)
        last = _safe_piece_end(judged, index, verdicts, context)
        unattended = (Decision.ALLOW,) if "approval" not in request else (Decision.ALLOW, Decision.APPROVE)
        if any(verdicts[later].decision not in unattended for later in range(index + 1, last + 1)):
            raise RequestRefused("step %d cannot run alone (its plan's own rules hold only with the steps after it), and those "
                                 "do not run unattended" % (index + 1), "plan-piece", field="step", value=index,
                                 hint="a person approves the whole plan; the host runs it in one piece")
        for current in range(index, last + 1):
            answer = _decide_and_run(dict(request, step=current), verdicts[current], spec, services, context, policy, places)
            run.record(current, answer)
            if answer.get("refused") or answer.get("rc"):
                break
        with_it = [dict(step=later, argv=plan[later], rc=run.answers[later].get("rc"), refused=run.answers[later].get("refused"))
                   for later in range(index + 1, last + 1) if later in run.answers]
        return dict(run.answers[index], **({"ran_with_it": with_it} if with_it else {}))


# the progress of the plans the executor ran steps of: one root-only file per run, kept a day
PLAN_RUN_TTL_S = 86400
_RUN_ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9._:-]{0,95}$")


def _runs_dir(approvals_dir):
    return os.path.join(os.path.dirname(approvals_dir), "runs")


class _PlanRun(object):
    """One run of a plan on this host, locked while a request works on it: the plan, the service, each step's answer.
    A run names one plan: the same run with another plan or service is refused, so a run cannot be stitched together."""

    def __init__(self, runs_dir, run_id, service, plan):
        self.runs_dir, self.run_id, self.service, self.plan = runs_dir, run_id, service, plan
        self.answers = {}
        self._handle = None

    def __enter__(self):
        with contextlib.suppress(FileExistsError):
            os.makedirs(self.runs_dir, mode=0o700)
        _prune_runs(self.runs_dir, time.time())
        fd = os.open(os.path.join(self.runs_dir, self.run_id), os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
        self._handle = os.fdopen(fd, "r+")
        fcntl.flock(self._handle, fcntl.LOCK_EX)
        kept = self._handle.read()
        if kept:
            record = json.loads(kept)
            if record.get("plan") != self.plan or record.get("service") != self.service:
                self._handle.close()
                raise RequestRefused("run %s is a run of another plan: a run's steps all come from one plan" % self.run_id, "plan-run",
                                     field="run", value=self.run_id, hint="send each plan's steps under a run of its own")
            self.answers = dict((int(step), answer) for step, answer in record.get("answers", {}).items())
        return self

    def record(self, step, answer):
        self.answers[step] = answer
        self._handle.seek(0)
        self._handle.truncate()
        self._handle.write(json.dumps(dict(service=self.service, plan=self.plan, at=time.time(),
                                           answers=dict((str(k), v) for k, v in self.answers.items()))))
        self._handle.flush()

    def __exit__(self, *_exc):
        if self._handle is not None and not self._handle.closed:
            self._handle.close()


def unfinished_runs(approvals_dir, services, now, idle_s=MAX_TIMEOUT):
    """The runs of the services' plans that stopped halfway (a step not sent for longer than a step may take, and no
    step failed): a plan abandoned on this host, for the next check to report."""
    found = []
    runs_dir = _runs_dir(approvals_dir)
    for name in sorted(os.listdir(runs_dir)) if os.path.isdir(runs_dir) else []:
        with contextlib.suppress(OSError, ValueError):
            fd = os.open(os.path.join(runs_dir, name), os.O_RDONLY | os.O_NOFOLLOW | os.O_CLOEXEC)
            with os.fdopen(fd) as handle:
                record = json.loads(handle.read() or "{}")
            answers = record.get("answers") or {}
            ended = any(answer.get("refused") or answer.get("rc") for answer in answers.values())
            if (record.get("service") in services and answers and not ended and len(answers) < len(record.get("plan") or ())
                    and now - record.get("at", now) > idle_s):
                found.append(dict(run=name, service=record["service"], plan=record["plan"], ran=sorted(int(step) for step in answers),
                                  at=record["at"]))
    return found


def _prune_runs(runs_dir, now):
    for name in os.listdir(runs_dir):
        path = os.path.join(runs_dir, name)
        with contextlib.suppress(OSError):
            if now - os.lstat(path).st_mtime > PLAN_RUN_TTL_S:
                os.unlink(path)


def _safe_piece_end(judged, index, verdicts, context):
    """The last step of the smallest piece from ``index`` on that the plan's own rules allow as a plan of its own (its
    prefix judged as the whole plan: nothing stricter than the whole plan's verdicts)."""
    for last in range(index, len(judged)):
        piece, _decision = judge_plan(judged[:last + 1], context)
        if all(piece[step].decision is verdicts[step].decision for step in range(last + 1)):
            return last
    return len(judged) - 1


def _decide_and_run(request, verdict, spec, services, context, policy, places):
    """The step's verdict held against the host's mode and a person's approval, then the step run (or refused)."""
    config_dir, approvals_dir = places
    kind = request.get("kind", "step")
    response = dict(refused=False, decision=verdict.decision.value, rule=verdict.rule, reason=verdict.reason,
                    policy_version=policy.version, argv=list(verdict.argv))
    in_review = kind == "step" and _mode(spec, services) == "review"
    if verdict.decision is Decision.BLOCK or ((verdict.decision is Decision.APPROVE or in_review) and "approval" not in request):
        needs = " (with a person's approval signed by a key the host lists)" if verdict.decision is not Decision.BLOCK else ""
        said = "this host's policy says %s%s: %s" % (verdict.decision.value, needs, verdict.reason)
        if verdict.decision is Decision.ALLOW:
            said = "this host runs %s in review mode: every step needs a person's approval signed by a key the host lists" % spec["name"]
        response.update(refused=True, reason=said)
        return response
    if "approval" in request and verdict.decision is not Decision.BLOCK:
        response["approved_by"] = _approved_by(request, services, config_dir, approvals_dir)
    # none for a step no rule knows, which a person approved
    rule = next((rule for rule in policy.rules if rule.id == verdict.rule), None)
    if kind == "read" and not (rule and rule.read_only):
        response.update(refused=True, reason="asked as a read, but %s changes things" % verdict.rule)
        return response
    redirectable = _redirectable_operand(verdict.argv[1:], verdict.argv[0] in METADATA_READERS) \
        if rule and rule.read_only and verdict.become else None
    if redirectable:
        response.update(refused=True, rule="read-could-be-redirected", reason=redirectable)
        return response
    started = time.time()
    if rule and rule.restores in KNOWN_GOOD_SETTINGS:
        response.update(_restore_known_good(spec, verdict.argv))
    elif rule and rule.restores:
        response.update(_repair(rule, verdict.argv, context, policy))
    elif verdict.argv[0] == "kill" and verdict.become:
        response.update(signal_processes(verdict.argv, lambda: _judged_again(verdict, spec, services, policy)))
    else:
        response.update(_run(verdict.argv, verdict.become, request.get("timeout", 120)))
    response["seconds"] = round(time.time() - started, 3)
    return response


def _mode(spec, services):
    """How far sentinel.heal acts on the service, as the host declares it: the service's own mode, else the host's."""
    return spec.get("mode") or services.get("mode") or "autonomous"


def _refuse_when_a_person_said_so(spec, services, kind):
    """A person's word on the host, read here (never the controller's word for it): the maintenance marker holds every
    request for the service back, and in observe mode nothing changes it."""
    held = marker_holds(read_marker(), spec["name"], time.time())
    if held:
        raise RequestRefused("%s: %s; the host holds every request for it back" % (spec["name"], held), "maintenance", field="service",
                             value=spec["name"], hint="wait until the marker's end, or remove it when the work is done")
    if kind == "step" and _mode(spec, services) == "observe":
        raise RequestRefused("this host runs %s in observe mode: nothing changes it" % spec["name"], "observe-mode", field="service",
                             value=spec["name"], hint="set the service's mode (or host_mode) to review or autonomous and apply sentinel.heal.host")


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


# programs that read names and metadata, never a file's content: through an entry a service account owns (the service's
# own directories, where a person looks first) they run, and a link on the way is still refused
METADATA_READERS = frozenset(("ls", "stat", "namei", "du"))


def _redirectable_operand(args, metadata_only=False):
    """Why a read run as root could be led elsewhere than the path it names, or None. The program a read runs (cat,
    tail, grep) opens its operands itself and follows every link on the way, so such a read is refused, never run on a
    path another account than root could change: one whose existing components include a symbolic link, an entry not
    root's, or a directory a non-root group or everyone may write (without the sticky bit). Each argument is read as a
    path, as the program may (a relative one from /, where steps run; the value of --opt=VALUE too): a component that
    does not exist ends the walk, having nothing to follow. The service's own logs still come with service_check, which
    reads them without following a link. A read of names and metadata only (``metadata_only``) may pass entries an
    account owns: swapped for a link at that moment, it would show another entry's metadata, never its content."""
    for arg in args:
        for value in (arg, arg.partition("=")[2]) if arg.startswith("--") else (arg,):
            reason = _redirectable_path(value, metadata_only)
            if reason:
                return ("%r is read as root and could be led elsewhere: %s; refused (service_check reads the service's logs "
                        "without following links)" % (arg, reason))
    return None


def _redirectable_path(path, metadata_only=False):
    current = ""
    for part in path.split("/"):
        if part in ("", "."):
            continue
        current += "/" + part
        try:
            info = os.lstat(current)
        except OSError:
            return None
        if stat.S_ISLNK(info.st_mode):
            return "%s is a symbolic link" % current
        if info.st_uid != 0 and not metadata_only:
            return "%s is not root's (uid %d)" % (current, info.st_uid)
        others_write = info.st_mode & stat.S_IWOTH or (info.st_mode & stat.S_IWGRP and info.st_gid != 0)
        if stat.S_ISDIR(info.st_mode) and others_write and not info.st_mode & stat.S_ISVTX:
            return "%s may be written by others than root" % current
    return None


def signal_processes(argv, judged_again):
    """kill [-SIGNAL] PID..., sent by the executor itself and only to the processes it judged: a pidfd is opened for
    each pid first, then ``judged_again()`` (the step judged again in the context read after that, None when it holds,
    else why not) says whether each pid is still what the step was allowed for, and the signal goes through the pidfd.
    A pid whose process ended and was taken by another between the judgement and the signal is never signalled: the
    pidfd names the process, not the number."""
    parsed = _kill_operands(argv)
    if parsed is None:
        return dict(refused=True, rule="signal-by-pidfd", reason="%r: the executor sends signals itself as kill [-SIGNAL] PID..., "
                    "with a signal by name or number and pids only" % " ".join(argv))
    signum, pids = parsed
    opened = []
    try:
        for pid in pids:
            try:
                opened.append(os.pidfd_open(pid))
            except ProcessLookupError:
                return dict(refused=True, rule="process-gone", reason="process %d has ended since it was judged: nothing was signalled" % pid)
        changed = judged_again()
        if changed:
            return dict(refused=True, rule="process-changed", reason="judged again with each pid held: %s; nothing was signalled" % changed)
        ended = []
        for pid, pidfd in zip(pids, opened):
            try:
                signal.pidfd_send_signal(pidfd, signum)
            except ProcessLookupError:
                ended.append(pid)
    finally:
        for pidfd in opened:
            os.close(pidfd)
    said = "".join("process %d had ended: not signalled\n" % pid for pid in ended)
    return dict(rc=1 if ended else 0, stdout="", stderr=said)


def _kill_operands(argv):
    """(signal, pids) of kill [-SIGNAL] PID... (SIGTERM when it names none), or None for anything else."""
    args = list(argv[1:])
    signum = signal.SIGTERM
    if args and args[0].startswith("-"):
        name = args.pop(0)[1:].upper()
        try:
            signum = signal.Signals(int(name)) if name.isdigit() else signal.Signals[name if name.startswith("SIG") else "SIG" + name]
        except (KeyError, ValueError):
            return None
    if not args or not all(arg.isdigit() and int(arg) > 0 for arg in args):
        return None
    return signum, [int(arg) for arg in args]


def _judged_again(verdict, spec, services, policy):
    """None when the step is judged as before in the context read now (the same rule, the same decision), else what
    changed: a pid no longer the service's, a squatter gone, another process in its place."""
    again, _effect = judge_argv(list(verdict.argv), _context_now(spec, services, detect_service_manager()), policy)
    if (again.rule, again.decision) == (verdict.rule, verdict.decision):
        return None
    return "now %s (%s): %s, not %s as when it was judged" % (again.decision.value, again.rule, again.reason, verdict.rule)


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


def record_decision(caller, request, response, log_file=LOG_FILE, rate_dir=None, now=None):
    """One bounded line per request to the journal (or the log file): who asked, what, the decision, its rule, the
    status; past LOG_RATE entries a caller's minute, only the count of those suppressed, once the minute is over."""
    entry = dict(caller=caller, host=request.get("host"), service=request.get("service"), policy_version=request.get("policy_version"),
                 step=response.get("argv") or _requested_step(request),
                 decision="refused" if response.get("refused") else response.get("decision"), rule=response.get("rule"),
                 reason=response.get("reason"), rc=response.get("rc"))
    if response.get("approved_by"):
        entry["approved_by"] = response["approved_by"]
    if response.get("ran_with_it"):
        entry["ran_with_it"] = [" ".join(later["argv"]) for later in response["ran_with_it"]]
    if response.get("reads"):
        entry["reads"] = ["%s: %s (%s)" % (" ".join(read["argv"]), read["decision"], read["rule"]) for read in response["reads"]]
    for key in ("run", "failure_class", "fingerprint"):  # which incident of the controller's the step was for
        if request.get(key):
            entry[key] = request[key]
    suppressed, write = _rate(caller, rate_dir, time.time() if now is None else now)
    if suppressed:
        _write_log_line(json.dumps(dict(caller=caller, decision="suppressed", suppressed=suppressed,
                                        reason="%d requests suppressed (over %d a minute)" % (suppressed, LOG_RATE)), sort_keys=True),
                        True, log_file)
    if write:
        _write_log_line(bounded_log_line(entry), bool(response.get("refused")), log_file)


def bounded_log_line(entry):
    """The entry as one JSON line of at most MAX_LOG_ENTRY_BYTES: each field cut (a step's arguments counted too) and
    what was cut counted under ``truncated``; JSON escapes every control character, so nothing is echoed unescaped."""
    truncated = {}
    bounded = {}
    for key, value in entry.items():
        if isinstance(value, list):
            args = [_cut(str(arg), MAX_LOG_FIELD_CHARS // 4) for arg in value[:MAX_LOG_ARGS]]
            if len(value) > MAX_LOG_ARGS or args != [str(arg) for arg in value]:
                truncated[key] = len(json.dumps(value))
            bounded[key] = args
        elif isinstance(value, str) and len(value) > MAX_LOG_FIELD_CHARS:
            truncated[key] = len(value)
            bounded[key] = _cut(value, MAX_LOG_FIELD_CHARS)
        elif value is None or isinstance(value, (bool, int, float, str)):
            bounded[key] = value
        else:
            truncated[key] = len(json.dumps(value, default=str))
            bounded[key] = _cut(json.dumps(value, default=str), MAX_LOG_FIELD_CHARS)
    if truncated:
        bounded["truncated"] = truncated
    line = json.dumps(bounded, sort_keys=True)
    # escapes can still make a line longer than its characters: halve the longest field's own text (not its escaped
    # form, which escaping again would grow) until it fits; a field too short to halve goes
    while len(line.encode("utf-8")) > MAX_LOG_ENTRY_BYTES:
        key = max((k for k in bounded if k != "truncated"), key=lambda k: len(json.dumps(bounded[k])))
        text = bounded[key] if isinstance(bounded[key], str) else json.dumps(bounded[key])
        truncated[key] = truncated.get(key) or len(text)
        bounded[key] = _cut(text, len(text) // 2) if len(text) > 16 else None
        bounded["truncated"] = truncated
        line = json.dumps(bounded, sort_keys=True)
    return line


def _cut(text, limit):
    return text if len(text) <= limit else text[:limit] + "[...]"


def _rate(caller, rate_dir, now):
    """(requests suppressed in the caller's last minute, to be said now; whether this request's entry is written),
    counted in a root-only file per caller under ``rate_dir``, locked: requests run at once count once each."""
    if rate_dir is None:
        return 0, True
    with contextlib.suppress(FileExistsError):
        os.makedirs(rate_dir, mode=0o700)
    path = os.path.join(rate_dir, "".join(char if char.isalnum() or char in "._-" else "_" for char in caller)[:64] or "_")
    try:
        fd = os.open(path, os.O_RDWR | os.O_CREAT | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600)
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            return 0, True  # a link planted there: write every entry rather than trust it
        raise
    with os.fdopen(fd, "r+") as handle:
        fcntl.flock(handle, fcntl.LOCK_EX)
        try:
            window, count, suppressed = json.loads(handle.read() or "[0, 0, 0]")
        except ValueError:
            window, count, suppressed = 0, 0, 0
        said = 0
        if now - window >= LOG_RATE_WINDOW_S:
            window, count, said, suppressed = now, 0, suppressed, 0
        count += 1
        write = count <= LOG_RATE
        if not write:
            suppressed += 1
        handle.seek(0)
        handle.truncate()
        handle.write(json.dumps([window, count, suppressed]))
    return said, write


def _write_log_line(line, warning, log_file):
    if _has_journal():
        syslog.openlog(LOG_IDENTIFIER, syslog.LOG_PID, syslog.LOG_AUTHPRIV)
        syslog.syslog(syslog.LOG_WARNING if warning else syslog.LOG_NOTICE, line)
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
