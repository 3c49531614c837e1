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

This module decides; beside it in _host/: requests.py checks the request, host_configuration.py reads what the host
role wrote, host_context.py gathers the incident's context, plan_runs.py keeps each plan's progress, step_running.py
runs a step decided to run, decision_log.py writes what was decided, asking.py asks the executor through sudo. Every
name this module had before stays importable from here.
"""

from __future__ import annotations

import json
import os
import pwd
import sys
import time

from ansible_collections.sentinel.heal.plugins.module_utils._guard.approvals import APPROVERS_FILE, USED_DIR, ApprovalRefused, verify_approval
from ansible_collections.sentinel.heal.plugins.module_utils._guard.judge import KNOWN_GOOD_SETTINGS, Decision, judge_argv, judge_plan
from ansible_collections.sentinel.heal.plugins.module_utils._guard.redact import redact
from ansible_collections.sentinel.heal.plugins.module_utils._host.asking import ask, check_through_executor
from ansible_collections.sentinel.heal.plugins.module_utils._host.decision_log import (
    LOG_FILE,
    LOG_IDENTIFIER,
    LOG_RATE,
    LOG_RATE_WINDOW_S,
    MAX_LOG_ARGS,
    MAX_LOG_ENTRY_BYTES,
    MAX_LOG_FIELD_CHARS,
    bounded_log_line,
    record_decision,
)
from ansible_collections.sentinel.heal.plugins.module_utils._host.host_configuration import (
    CONFIG_DIR,
    EXECUTOR_PATH,
    EXECUTOR_RULE,
    as_the_host_declares,
    enforced_policy,
    load_host_policy,
    load_json,
    other_services,
    read_host_file,
    service_mode,
    with_defaults,
)
from ansible_collections.sentinel.heal.plugins.module_utils._host.host_context import context_now
from ansible_collections.sentinel.heal.plugins.module_utils._host.maintenance import marker_holds, read_marker
from ansible_collections.sentinel.heal.plugins.module_utils._host.plan_runs import (
    PLAN_RUN_TTL_S,
    PlanRun,
    plan_runs_dir,
    safe_piece_end,
    unfinished_runs,
)
from ansible_collections.sentinel.heal.plugins.module_utils._host.probe import (
    NOT_READ_FOR,
    SERVICE_OPTIONS,
    ProbeConfigError,
    check_one,
    check_services,
    detect_service_manager,
)
from ansible_collections.sentinel.heal.plugins.module_utils._host.requests import (
    MAX_READS_AHEAD,
    MAX_REQUEST_BYTES,
    MAX_TIMEOUT,
    RequestRefused,
    parse_request,
)
from ansible_collections.sentinel.heal.plugins.module_utils._host.step_running import (
    MAX_OUTPUT_BYTES,
    METADATA_READERS,
    SAFE_PATH,
    redirectable_operand,
    repair,
    restore_known_good,
    run_argv,
    signal_processes,
)
from ansible_collections.sentinel.heal.plugins.module_utils._host.sudo_rules import other_sudo_rules
from ansible_collections.sentinel.heal.plugins.module_utils._text import clip

# the names this module had before its rooms beside it, importable from here as before
__all__ = [
    "CONFIG_DIR", "DOWN_CLASSES", "EXECUTOR_PATH", "EXECUTOR_RULE", "LOG_FILE", "LOG_IDENTIFIER", "LOG_RATE", "LOG_RATE_WINDOW_S",
    "MAX_LOG_ARGS", "MAX_LOG_ENTRY_BYTES", "MAX_LOG_FIELD_CHARS", "MAX_OUTPUT_BYTES", "MAX_READS_AHEAD", "MAX_REQUEST_BYTES",
    "MAX_TIMEOUT", "METADATA_READERS", "PLAN_RUN_TTL_S", "READ_OUTPUT_LIMIT", "REFUSED", "SAFE_PATH", "RequestRefused", "ask",
    "bounded_log_line", "check", "check_through_executor", "clean_environment", "handle", "load_host_policy", "main",
    "record_decision", "signal_processes", "unfinished_runs",
]

# each answer of evidence read within a check cut to what the module's own check keeps
READ_OUTPUT_LIMIT = 4000
# what a refusal exits with (EX_NOPERM): the controller tells it from a step that ran and failed
REFUSED = 77
# what sudo itself sets for the executor (who called it): all of the caller's environment the executor keeps
_FROM_SUDO = ("SUDO_USER", "SUDO_UID", "SUDO_GID")


def main(config_dir=CONFIG_DIR, log_file=LOG_FILE, approvals_dir=USED_DIR):
    """Read one request from standard input, decide, run, log; the exit status is the step's, or REFUSED."""
    clean_environment()
    raw = sys.stdin.buffer.read(MAX_REQUEST_BYTES + 1)
    caller = os.environ.get("SUDO_USER") or pwd.getpwuid(os.getuid()).pw_name
    request = {}
    try:
        request = parse_request(raw)
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


def check(request, config_dir=CONFIG_DIR, approvals_dir=USED_DIR):
    """service_check as root on the host, of services the host declares, as it declares them: the request chooses which,
    never what is read for them. The evidence it asks to be read for a service the check finds failing is judged here,
    each command as a read request of its own would be (:func:`_read_ahead`)."""
    policy = enforced_policy(request, config_dir)
    services = load_json(os.path.join(config_dir, "services.json"))
    declared = dict((spec.get("name"), spec) for spec in services.get("services") or [])
    unknown = [name for name in request["services"] if name not in declared]
    if unknown:
        raise RequestRefused("%s: not a service this host declares" % ", ".join(unknown), "undeclared-service", field="services",
                             value=unknown, hint="declare it in autoheal_services and apply the sentinel.heal.host role")
    # each spec with the host's own restore setting filled in: the controller plans a restore within it (a restore the
    # host sends to a person is an approval request, never a refusal)
    params = dict(services=[with_defaults(as_the_host_declares(declared[name], services), SERVICE_OPTIONS) for name in request["services"]],
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
        spec = as_the_host_declares(declared[failure["name"]], services)
        context = context_now(spec, services, manager, failure)
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


def handle(request, config_dir=CONFIG_DIR, approvals_dir=USED_DIR):
    """Judge the request's plan in the context gathered now, and run its step when the host's policy allows it."""
    policy = enforced_policy(request, config_dir)
    services = load_json(os.path.join(config_dir, "services.json"))
    spec = next((s for s in services.get("services") or [] if s.get("name") == request["service"]), None)
    if spec is None:
        raise RequestRefused("%s is not a service this host declares" % request["service"], "undeclared-service", field="service",
                             value=request["service"], hint="declare it in autoheal_services and apply the sentinel.heal.host role")
    spec = as_the_host_declares(spec, services)
    kind = request.get("kind", "step")
    _refuse_when_a_person_said_so(spec, services, kind)
    manager = detect_service_manager()
    # a step's: the host's own check, whose evidence is the context too while the service fails
    checked = check_one(with_defaults(spec, SERVICE_OPTIONS), manager, 1, other_services(spec, services)) if kind == "step" else {}
    context = context_now(spec, services, manager, checked)
    # each step judged once; the plan's own rules then over the whole plan and, for a run, over its pieces
    judged = [judge_argv(step, context, policy) for step in request["plan"]]
    verdicts, _decision = judge_plan(judged, context)
    if checked:
        return _run_in_plan(request, (judged, verdicts), spec, services, (context, checked), policy, (config_dir, approvals_dir))
    return _decide_and_run(request, verdicts[request["step"]], spec, services, context, policy, (config_dir, approvals_dir))


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
    with PlanRun(plan_runs_dir(places[1]), request["run"], spec["name"], plan) as run:
        if index in run.answers:
            return dict(run.answers[index], ran_before=True)
        if index != len(run.answers):
            raise RequestRefused("step %d of run %s comes before step %d of its plan has run: steps run in order, once each"
                                 % (index + 1, request["run"], len(run.answers) + 1), "plan-order", field="step", value=index,
                                 hint="send the plan's steps in order, each once, under one run")
        if not run.answers and "approval" not in request:
            _hold_to_the_failure(checked, request)
        last = safe_piece_end(judged, index, verdicts, context)
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


def _decide_and_run(request, verdict, spec, services, context, policy, places):
    """The step's verdict held against the host's mode and a person's approval, then the step run (or refused)."""
    config_dir, approvals_dir = places
    kind = request.get("kind", "step")
    response = dict(refused=False, decision=verdict.decision.value, rule=verdict.rule, reason=verdict.reason,
                    policy_version=policy.version, argv=list(verdict.argv))
    in_review = kind == "step" and service_mode(spec, services) == "review"
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
    redirectable = redirectable_operand(verdict.argv[1:], verdict.argv[0] in METADATA_READERS) \
        if rule and rule.read_only and verdict.become else None
    if redirectable:
        response.update(refused=True, rule="read-could-be-redirected", reason=redirectable)
        return response
    started = time.time()
    if rule and rule.restores in KNOWN_GOOD_SETTINGS:
        response.update(restore_known_good(spec, verdict.argv))
    elif rule and rule.restores:
        response.update(repair(rule, verdict.argv, context, policy))
    elif verdict.argv[0] == "kill" and verdict.become:
        response.update(signal_processes(verdict.argv, lambda: _judged_again(verdict, spec, services, policy)))
    else:
        response.update(run_argv(verdict.argv, verdict.become, request.get("timeout", 120)))
    response["seconds"] = round(time.time() - started, 3)
    return response


def _refuse_when_a_person_said_so(spec, services, kind):
    """A person's word on the host, read here (never the controller's word for it): the maintenance marker holds every
    request for the service back, and in observe mode nothing changes it."""
    held = marker_holds(read_marker(), spec["name"], time.time())
    if held:
        raise RequestRefused("%s: %s; the host holds every request for it back" % (spec["name"], held), "maintenance", field="service",
                             value=spec["name"], hint="wait until the marker's end, or remove it when the work is done")
    if kind == "step" and service_mode(spec, services) == "observe":
        raise RequestRefused("this host runs %s in observe mode: nothing changes it" % spec["name"], "observe-mode", field="service",
                             value=spec["name"], hint="set the service's mode (or host_mode) to review or autonomous and apply sentinel.heal.host")


def _approved_by(request, services, config_dir, approvals_dir):
    """The approver whose signature the request carries, checked here (the controller's word is not enough)."""
    approvers = os.path.join(config_dir, APPROVERS_FILE)
    try:
        return verify_approval(request["approval"], request, services.get("host"),
                               read_host_file(approvers).decode("utf-8") if os.path.lexists(approvers) else "", approvals_dir)
    except ApprovalRefused as exc:
        raise RequestRefused("a person's approval is needed and the one sent does not hold: %s" % exc.message, "approval", field=exc.field,
                             value=exc.value, hint=exc.hint) from None


def _judged_again(verdict, spec, services, policy):
    """None when the step is judged as before in the context read now (the same rule, the same decision), else what
    changed: a pid no longer the service's, a squatter gone, another process in its place."""
    again, _effect = judge_argv(list(verdict.argv), context_now(spec, services, detect_service_manager()), policy)
    if (again.rule, again.decision) == (verdict.rule, verdict.decision):
        return None
    return "now %s (%s): %s, not %s as when it was judged" % (again.decision.value, again.rule, again.reason, verdict.rule)
