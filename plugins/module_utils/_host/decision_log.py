"""The host's decision log: one bounded, escaped JSON line per request (who asked, what, the decision, its rule, the
status) to the journal (identifier ``sentinel-heal-exec``), or to a file when the host has none; past its rate a
caller's entries are counted and said once."""

from __future__ import annotations

import contextlib
import errno
import fcntl
import json
import os
import stat
import syslog
import time

LOG_IDENTIFIER = "sentinel-heal-exec"
LOG_FILE = "/var/log/sentinel-heal/exec.log"
# one decision-log entry at most (the request's fields cut to fit, and counted), and at most so many entries per
# caller and minute: more are counted and said in one entry ("N requests suppressed"), not written one by one
MAX_LOG_ENTRY_BYTES = 4096
MAX_LOG_FIELD_CHARS = 512
MAX_LOG_ARGS = 16
LOG_RATE = 60
LOG_RATE_WINDOW_S = 60


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
