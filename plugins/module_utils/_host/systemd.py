# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What systemd knows about a service's unit, read on the target host (standard library only).

Everything comes from ``systemctl show`` properties and the unit's journal, never from the prose of
``systemctl status``: the unit that really runs the service (Debian's ``postgresql`` is a wrapper whose
member ``postgresql@15-main`` runs the cluster; aliases such as ``redis`` resolve to their unit), its
state and result, the step that failed, its drop-ins, the units it requires that failed, and the
journal's lines since its last start, with the line that most likely names the cause.

One room of about 430 lines: every function reads the same ``systemctl show`` properties and the same unit's journal,
and classify and describe read what the others found; what only names units for the probe is short.
"""

from __future__ import annotations

import json
import re
import signal
import time
from datetime import datetime

from ansible_collections.sentinel.heal.plugins.module_utils._host.command import run
from ansible_collections.sentinel.heal.plugins.module_utils._text import clip

UNIT_PROPERTIES = (
    "Id", "LoadState", "ActiveState", "SubState", "Result", "UnitFileState", "NRestarts", "ExecMainCode", "ExecMainStatus",
    "Restart", "RestartUSec", "FragmentPath", "DropInPaths", "ConsistsOf", "Requires", "BindsTo", "Requisite", "After",
    "InactiveExitTimestamp", "InactiveExitTimestampMonotonic", "ActiveEnterTimestampMonotonic", "StateChangeTimestamp",
    "InactiveEnterTimestamp", "InactiveEnterTimestampMonotonic",
    "RuntimeDirectory", "StateDirectory", "CacheDirectory", "LogsDirectory", "Type", "RemainAfterExit", "Names",
    "RuntimeDirectoryMode", "StateDirectoryMode", "CacheDirectoryMode", "LogsDirectoryMode", "User", "Group", "DynamicUser",
    "TriggeredBy",
)
# which directories systemd makes for a unit at its start, whose and with which mode, and when the unit last started and
# became active
DIRECTORY_PROPERTIES = (
    "Id", "LoadState", "Type", "RemainAfterExit", "ConsistsOf", "InactiveExitTimestamp", "ActiveEnterTimestamp", "User", "Group", "DynamicUser",
    "RuntimeDirectory", "RuntimeDirectoryMode", "StateDirectory", "StateDirectoryMode", "CacheDirectory", "CacheDirectoryMode",
    "LogsDirectory", "LogsDirectoryMode",
)
# what tells a unit that fronts others from one whose parts they are (``umbrella_members``)
UMBRELLA_PROPERTIES = ("Id", "ConsistsOf", "Type", "RemainAfterExit")
EXEC_PROPERTIES = ("ExecCondition", "ExecStartPre", "ExecStart", "ExecStartPost", "ExecStop", "ExecStopPost")
START_STEPS = ("ExecCondition", "ExecStartPre", "ExecStart", "ExecStartPost")
# how a process ended, as systemd numbers it (CLD_* of waitid(2))
EXIT_CODES = {"1": "exited", "2": "killed", "3": "dumped"}
# systemd's own exit statuses: the step failed before the program ran (systemd.exec(5), "Process exit codes")
EXIT_STATUSES = {
    200: "CHDIR", 201: "NICE", 202: "FDS", 203: "EXEC", 204: "MEMORY", 205: "LIMITS", 206: "OOM_ADJUST", 207: "SIGNAL_MASK",
    208: "STDIN", 209: "STDOUT", 210: "CHROOT", 211: "IOPRIO", 212: "TIMERSLACK", 213: "SECUREBITS", 214: "SETSCHEDULER",
    215: "CPUAFFINITY", 216: "GROUP", 217: "USER", 218: "CAPABILITIES", 219: "CGROUP", 220: "SETSID", 221: "CONFIRM",
    222: "STDERR", 224: "PAM", 225: "NETWORK", 226: "NAMESPACE", 227: "NO_NEW_PRIVILEGES", 228: "SECCOMP",
    229: "SELINUX_CONTEXT", 230: "PERSONALITY", 231: "APPARMOR_PROFILE", 232: "ADDRESS_FAMILIES", 233: "RUNTIME_DIRECTORY",
    235: "CHOWN", 236: "SMACK_PROCESS_LABEL", 237: "KEYRING", 238: "STATE_DIRECTORY", 239: "CACHE_DIRECTORY",
    240: "LOGS_DIRECTORY", 241: "CONFIGURATION_DIRECTORY", 242: "NUMA_POLICY", 243: "CREDENTIALS", 245: "BPF",
}
MAX_REQUIREMENTS = 8
# a service writes why it stops in the moments before it goes down (redis's last words, a crash's trace, a slow
# shutdown's lines): the seconds before its unit went down that are still its failure's
DYING_WORDS_S = 10
MAX_CAUSE_LINES = 3
CAUSE_LIMIT = 600
# the lines a block such as redis's "*** FATAL CONFIG FILE ERROR ***" holds after its first
BLOCK_LINES = 3
_OPENS_BLOCK = re.compile(r"^\*\*\* .+ \*\*\*$")
# a line that carries on the error of the line before it (PostgreSQL prefixes it as that line: time, [pid])
_CONTINUES = re.compile(r"^(?:.*\] )?(?:DETAIL|HINT|CONTEXT):\s|^>>> ")
JOURNAL_LIMIT = 4000
_EXEC_RESULT = re.compile(r"path=(?P<path>[^ ;]+) ;.*\bcode=(?P<code>[a-z]+) ; status=(?P<status>\d+)")
# a line of journalctl --output=short-iso: the time, the host, the program (and its pid), the message
JOURNAL_LINE = re.compile(r"^\S+ \S+ (?P<ident>[^\s\[:]+)(?:\[\d+\])?: (?P<message>.*)$")
# systemd's lines that say that a unit failed, never why
_BOOKKEEPING = re.compile(
    r"^(?:\S+: )?(?:Main process exited|Control process exited|Failed with result|Scheduled restart job|Start request repeated"
    r"|Killing process|Unit entered failed state|Consumed|Deactivated successfully|Stopped|Starting|Started|Failed to start"
    r"|Stopping|Found left-over process|This usually indicates unclean termination)", re.IGNORECASE)
_ERROR_WORDS = re.compile(
    r"\b(?:error|errors|failed|failure|fatal|emerg|crit|critical|panic|denied|no such|cannot|can't|could not|couldn't"
    r"|invalid|refused|not found|unable|permission|missing|unknown|bad|unrecognized|unrecognised|illegal|timed out|time limit)\b",
    re.IGNORECASE)
# systemd's own lines that a run of a unit failed or that its Restart= scheduled the next start (each release since 236
# words them so: "Failed with result 'timeout'.", "Scheduled restart job, restart counter is at 3.")
_RUN_FAILED = re.compile(r"^(?:\S+: )?Failed with result\b")
_RESTART_SCHEDULED = re.compile(r"^(?:\S+: )?Scheduled restart job\b")
MAX_RUN_ENDS = 200
# systemd's journal entry of a start job done: a unit started (a oneshot's "Finished"), with UNIT=, JOB_TYPE= and JOB_RESULT=
JOB_DONE_MESSAGE = "39f53479d3a045ac8e11786248231fbf"
MAX_UNITS_STARTED = 10
MAX_STARTS_EACH = 3
_TIMESPAN = re.compile(r"(\d+(?:\.\d+)?)\s*(us|ms|min|s|h)\b")
_SECONDS = {"us": 1e-6, "ms": 1e-3, "s": 1.0, "min": 60.0, "h": 3600.0}


def read_unit(name, timeout, journal_lines):
    """The unit that runs service ``name``, or None when systemd knows no such unit."""
    requested = _show([name], UNIT_PROPERTIES, timeout)
    if not requested or requested[0].get("LoadState") == "not-found":
        return None
    unit = requested[0]
    members = umbrella_members(unit)
    if members:
        states = _show(members, UNIT_PROPERTIES, timeout)
        if states:
            wrapper = dict((key, unit.get(key, "")) for key in ("Id", "LoadState", "ActiveState", "SubState", "UnitFileState"))
            wrapper["ConsistsOf"] = " ".join(members)
            unit = next((state for state in states if state.get("ActiveState") != "active"), states[0])
            unit["Wrapper"] = wrapper
    unit["failed_step"] = _failed_step(unit["Id"], timeout)
    unit["failed_requirements"] = _failed_requirements(unit, timeout)
    unit["restart_delay_s"] = timespan_seconds(unit.get("RestartUSec", ""))
    unit["restart_in_s"] = _restart_in(unit)
    unit["journal"] = _journal(unit, timeout, journal_lines)
    unit["cause"] = journal_cause(unit["journal"])
    return unit


def umbrella_members(unit):
    """The services a unit fronts, when it is an umbrella: a unit that runs nothing of its own (a target, or a oneshot
    that remains active after an ExecStart= such as Debian's postgresql's /bin/true) whose ``ConsistsOf=`` names the
    services that are ``PartOf=`` it (postgresql@15-main). A unit with a process of its own is the service, and what is
    part of it (a timer, a socket, a helper service declared ``PartOf=`` it) is the service's, never its runner; []."""
    runs_nothing = unit.get("Id", "").endswith(".target") or (
        unit.get("Type") == "oneshot" and unit.get("RemainAfterExit") == "yes")
    if not runs_nothing:
        return []
    return [member for member in unit.get("ConsistsOf", "").split() if member.endswith(".service")]


def fronted_units(name, timeout):
    """The units an umbrella fronts (``umbrella_members``: as Debian's postgresql fronts postgresql@15-main) with whether
    each is active; [] for a unit that fronts none."""
    [unit] = _show([name], UMBRELLA_PROPERTIES, timeout) or [{}]
    members = umbrella_members(unit)
    return [(member.get("Id", ""), member.get("ActiveState") == "active") for member in _show(members, ("Id", "ActiveState"), timeout)] \
        if members else []


def directory_units(name, timeout):
    """The units that run service ``name``, each with its DIRECTORY_PROPERTIES (``running_units``)."""
    return running_units(name, DIRECTORY_PROPERTIES, timeout)


def running_units(name, properties, timeout):
    """The units that run service ``name`` (the unit, or the services it fronts when it is an umbrella:
    ``umbrella_members``), each with ``properties``; [] when systemd knows no such unit."""
    properties = tuple(dict.fromkeys(("Id", "LoadState", *UMBRELLA_PROPERTIES, *properties)))
    [unit] = _show([name], properties, timeout) or [{}]
    if not unit or unit.get("LoadState") == "not-found":
        return []
    members = umbrella_members(unit)
    return _show(members, properties, timeout) if members else [unit]


def units_of(unit):
    """The units of the service whose unit service_check read (``read_unit``): that unit and the services that are part
    of it, and for a wrapper the wrapper and every unit it fronts."""
    units = set([unit["Id"]])
    units.update(member for member in unit.get("ConsistsOf", "").split() if member.endswith(".service"))
    wrapper = unit.get("Wrapper") or {}
    if wrapper.get("Id"):
        units.add(wrapper["Id"])
        units.update(wrapper.get("ConsistsOf", "").split())
    return units


def socket_activated(unit):
    """Whether a socket unit starts the service (``TriggeredBy=``): systemd itself (pid 1) then holds the service's
    listening socket, before the service starts and while it restarts (bookworm's mariadb.socket)."""
    return any(name.endswith(".socket") for name in str(unit.get("TriggeredBy") or "").split())


def unit_masked(unit):
    """A person masked the unit (for good or until the next boot): it must not run, and nothing starts it."""
    return any(
        bool(state) and (state.get("LoadState") == "masked" or (state.get("UnitFileState") or "").startswith("masked"))
        for state in (unit or {}, (unit or {}).get("Wrapper") or {})
    )


def classify(unit):
    """The failure class systemd's own state implies, or None when it implies none of its own."""
    if unit_masked(unit):
        return "masked"
    if unit.get("SubState") == "auto-restart":
        return "auto_restart"
    if unit.get("Result") == "start-limit-hit" and unit.get("NRestarts") == "0" and last_run_clean(unit):
        return "start_limit_hit"
    if unit.get("ActiveState") == "failed" and stopped_by_start_limit(unit):
        return "restart_loop"
    return None


def stopped_by_start_limit(unit):
    """systemd refused further starts of the unit: started (by its own Restart= or by someone) too often. After its
    own restarts it keeps the failed run's result and only says so in the journal."""
    return unit.get("Result") == "start-limit-hit" or (
        unit.get("NRestarts", "0") != "0" and "Start request repeated too quickly" in (unit.get("journal") or ""))


def last_run_clean(unit):
    """The unit's last run ended the way a stop ends it: no step failed, the main process exited with 0."""
    return unit.get("failed_step") is None and unit.get("ExecMainCode") in ("0", "1") and unit.get("ExecMainStatus") == "0"


def went_down_at(unit):
    """When the failure of a unit that had been running began (seconds since the epoch): DYING_WORDS_S before it went
    down (InactiveEnterTimestamp). What it wrote before then, while it ran, is context, never the failure's cause (an
    "Address already in use" a minute earlier, from a second instance started by hand). None for a unit that runs,
    whose last start never made it active (the whole start is its failure), or when systemd does not say."""
    if unit.get("ActiveState") not in ("inactive", "failed"):
        return None
    started, active, down = (unit.get(key, "0") for key in (
        "InactiveExitTimestampMonotonic", "ActiveEnterTimestampMonotonic", "InactiveEnterTimestampMonotonic"))
    if not (started.isdigit() and active.isdigit() and down.isdigit()) or not int(started) <= int(active) <= int(down):
        return None
    at = unit.get("InactiveEnterTimestamp", "")
    try:
        return float(at[1:]) - DYING_WORDS_S if at.startswith("@") else None
    except ValueError:
        return None


def start_failed(unit):
    """The unit's last start never made it active (a start step failed, or the process died while starting)."""
    step = unit.get("failed_step") or {}
    if step.get("step") in ("ExecCondition", "ExecStartPre", "ExecStartPost"):
        return True
    started, active = unit.get("InactiveExitTimestampMonotonic", "0"), unit.get("ActiveEnterTimestampMonotonic", "0")
    return unit.get("ActiveState") == "failed" and started.isdigit() and active.isdigit() and int(active) < int(started)


def describe(unit, failure_class):
    """One sentence, for the incident's summary, of what systemd says about a unit that is not running."""
    if unit.get("ActiveState") == "active" and failure_class not in ("masked",):
        return None
    name = unit["Id"]
    restarts = unit.get("NRestarts", "0")
    if failure_class == "masked":
        text = "unit %s is masked" % name
    elif failure_class == "auto_restart":
        text = "unit %s is down and systemd restarts it by itself (Restart=%s, in %s; restarted %s times before)" % (
            name, unit.get("Restart"), unit.get("RestartUSec"), restarts)
    elif failure_class == "start_limit_hit":
        text = "unit %s hit its start limit (started too often); its last run ended cleanly" % name
    elif failure_class == "restart_loop":
        by_whom = "restarted %s times by systemd's Restart=%s" % (restarts, unit.get("Restart")) if restarts != "0" else "started again and again"
        text = "unit %s kept failing (%s) until its start limit stopped it: %s" % (name, by_whom, _how_it_ended(unit))
    elif unit.get("ActiveState") == "failed":
        text = "unit %s %s: %s" % (name, "failed to start" if start_failed(unit) else "failed", _how_it_ended(unit))
    else:
        text = "unit %s is %s (%s)" % (name, unit.get("ActiveState"), unit.get("SubState"))
    if unit.get("DropInPaths"):
        text += "; its drop-ins: %s" % unit["DropInPaths"]
    if unit.get("failed_requirements"):
        text += "; it requires %s, which failed" % ", ".join(unit["failed_requirements"])
    if unit.get("cause") and failure_class != "start_limit_hit":
        text += "; its journal says: %s" % unit["cause"]
    return text


def _how_it_ended(unit):
    step = unit.get("failed_step")
    if step:
        return "result %s, %s %s %s" % (unit.get("Result"), step["step"], step["path"], _ending(step["code"], step["status"]))
    code = EXIT_CODES.get(unit.get("ExecMainCode", ""), "")
    if code:
        return "result %s, main process %s" % (unit.get("Result"), _ending(code, unit.get("ExecMainStatus", "")))
    return "result %s" % unit.get("Result")


def _ending(code, status):
    if code in ("killed", "dumped") and status.isdigit():
        try:
            return "%s by signal %s" % (code, signal.Signals(int(status)).name)
        except ValueError:
            return "%s by signal %s" % (code, status)
    number = int(status) if status.isdigit() else None
    return "exited with status %s%s" % (status, "/" + EXIT_STATUSES[number] if number in EXIT_STATUSES else "")


def journal_cause(journal):
    """The journal's lines that say what went wrong (at most MAX_CAUSE_LINES errors, joined, each whole as the service
    printed it: with the lines that carry it on, see ``error_blocks``): the service's own lines, or systemd's when the
    service said nothing (it could not even be run)."""
    lines = [JOURNAL_LINE.match(line) for line in (journal or "").splitlines()]
    entries = [(match.group("ident"), match.group("message").strip()) for match in lines if match]
    for own in (True, False):
        messages = [message for ident, message in entries if (ident != "systemd") == own]
        said = []
        for block in error_blocks(messages):
            if _ERROR_WORDS.search(block[0]) and not _BOOKKEEPING.match(block[0]) and " | ".join(block) not in said:
                said.append(" | ".join(block))
        if said:
            return clip(" | ".join(said[:MAX_CAUSE_LINES]), CAUSE_LIMIT)
    return None


def error_blocks(lines):
    """The lines, each with the lines that carry on what it began, as one block: PostgreSQL's DETAIL, HINT and CONTEXT
    lines (which versions, which file), and the lines after redis's "*** FATAL CONFIG FILE ERROR ***" (the line number,
    ">>> 'the directive'", why). A cause quoted without them does not say which directive or which version."""
    blocks = []
    open_lines = 0
    for line in lines:
        if blocks and (open_lines or _CONTINUES.search(line)):
            blocks[-1].append(line)
            open_lines = max(open_lines - 1, 0)
            continue
        blocks.append([line])
        open_lines = BLOCK_LINES if _OPENS_BLOCK.match(line) else 0
    return blocks


def timespan_seconds(text):
    """systemd's time span ("100ms", "1min 30s") in seconds; 0.0 when it is not one."""
    return round(sum(float(number) * _SECONDS[unit] for number, unit in _TIMESPAN.findall(text or "")), 3)


def _show(names, properties, timeout):
    """`systemctl show` of several units: one dict of properties per unit, in order; [] when systemctl fails."""
    query = ["--property=" + ",".join(properties), "--", *names]
    rc, output = run(["systemctl", "show", "--timestamp=unix", *query], timeout, limit=20000)
    if rc != 0:  # systemd before 248 has no --timestamp; its timestamps are then local dates
        rc, output = run(["systemctl", "show", *query], timeout, limit=20000)
    if rc != 0:
        return []
    units = []
    for block in output.split("\n\n"):
        unit = dict(line.split("=", 1) for line in block.splitlines() if "=" in line)
        if unit.get("Id"):
            units.append(unit)
    return units


def _restart_in(unit):
    """Seconds until systemd restarts a unit in auto-restart (its RestartSec counts from when it went down), or None."""
    changed = unit.get("StateChangeTimestamp", "")
    if unit.get("SubState") != "auto-restart" or not changed.startswith("@"):
        return None
    try:
        return round(max(0.0, float(changed[1:]) + unit["restart_delay_s"] - time.time()), 3)
    except ValueError:
        return None


def _failed_step(name, timeout):
    """The first step (ExecStartPre=, ExecStart=, ...) of the unit's last run that failed, or None."""
    rc, output = run(["systemctl", "show", "--property=" + ",".join(EXEC_PROPERTIES), "--", name], timeout, limit=20000)
    if rc != 0:
        return None
    for line in output.splitlines():
        step, _sep, value = line.partition("=")
        result = _EXEC_RESULT.search(value)
        if result and (result.group("code") != "exited" or result.group("status") != "0"):
            return dict(step=step, path=result.group("path"), code=result.group("code"), status=result.group("status"))
    return None


def _failed_requirements(unit, timeout):
    required = []
    for key in ("Requires", "BindsTo", "Requisite"):
        required.extend(name for name in unit.get(key, "").split() if name not in required)
    if not required:
        return []
    states = _show(required, ("Id", "ActiveState"), timeout)
    return [state["Id"] for state in states if state.get("ActiveState") == "failed"][:MAX_REQUIREMENTS]


def _journal(unit, timeout, lines):
    """The unit's newest journal lines since its failure began (went_down_at), else since its last start (this boot's
    when systemd does not say when), oldest first. Read newest first: with --since, --lines alone counts from the
    oldest line. The matches are --unit's and systemd's own UNIT= field from root: journald learns a process's unit
    from its cgroup when the line arrives, and the child that failed to spawn the service ("Failed at step CHDIR
    spawning /usr/sbin/nginx") has often exited by then, so on a busy host --unit alone misses the one line that
    names the cause."""
    down = went_down_at(unit)
    since = unit.get("InactiveExitTimestamp", "") if down is None else "@%d" % down
    name = unit["Id"]
    argv = ["journalctl", "--no-pager", "--quiet", "--output=short-iso", "--reverse", "--lines=%d" % lines,
            "--since=" + since if since.startswith("@") else "--boot",
            "_SYSTEMD_UNIT=" + name, "+", "UNIT=" + name, "_UID=0", "+", "OBJECT_SYSTEMD_UNIT=" + name, "_UID=0",
            "+", "COREDUMP_UNIT=" + name, "_UID=0"]
    rc, output = run(argv, timeout, limit=JOURNAL_LIMIT)
    return "\n".join(reversed(output.splitlines())) if rc == 0 else ""


def run_ends(name, since, timeout):
    """How the runs of unit ``name`` ended since ``since`` (seconds since the epoch), in systemd's own lines: (the times
    its Restart= scheduled a start, the times a run failed, the unit's journal meanwhile, oldest first). A unit in a
    restart loop whose runs outlast a snapshot or a settle window still leaves these."""
    argv = ["journalctl", "--no-pager", "--quiet", "--output=short-iso-precise", "--reverse", "--lines=%d" % MAX_RUN_ENDS, "--since=@%d" % int(since),
            "_SYSTEMD_UNIT=" + name, "+", "UNIT=" + name, "_UID=0"]
    rc, output = run(argv, timeout, limit=JOURNAL_LIMIT)
    if rc != 0:
        return [], [], ""
    restarts, failures, lines = [], [], []
    for line in reversed(output.splitlines()):
        match = JOURNAL_LINE.match(line)
        try:
            at = datetime.strptime(line.split(" ", 1)[0], "%Y-%m-%dT%H:%M:%S.%f%z").timestamp()
        except ValueError:
            continue
        if at < since:  # --since takes whole seconds
            continue
        lines.append(line)
        if match and match.group("ident") == "systemd":
            if _RESTART_SCHEDULED.match(match.group("message")):
                restarts.append(at)
            elif _RUN_FAILED.match(match.group("message")):
                failures.append(at)
    return restarts, failures, "\n".join(lines)


def units_started(since, exclude, timeout):
    """The services systemd started since ``since`` (seconds since the epoch) besides ``exclude`` (the service's own
    units): a timer's service, a configuration-management run, whatever else ran on the host after the service was
    last seen as it should be. Each with its latest starts, the unit started last at the end."""
    argv = ["journalctl", "--no-pager", "--quiet", "--output=json", "--output-fields=UNIT,JOB_TYPE,JOB_RESULT", "--reverse",
            "--lines=%d" % MAX_RUN_ENDS, "--since=@%d" % int(since), "MESSAGE_ID=" + JOB_DONE_MESSAGE, "_PID=1"]
    rc, output = run(argv, timeout, limit=200000)
    if rc != 0:
        return []
    starts = {}
    for line in reversed(output.splitlines()):
        try:
            entry = json.loads(line)
            at = int(entry["__REALTIME_TIMESTAMP"]) / 1e6
        except (ValueError, KeyError, TypeError):
            continue
        unit = entry.get("UNIT")
        if (not isinstance(unit, str) or not unit.endswith(".service") or unit in exclude or at < since
                or entry.get("JOB_TYPE") != "start" or entry.get("JOB_RESULT") != "done"):
            continue
        starts.setdefault(unit, []).append(at)
    ordered = sorted(starts.items(), key=lambda item: item[1][-1])[-MAX_UNITS_STARTED:]
    return [dict(unit=unit, at=times[-MAX_STARTS_EACH:]) for unit, times in ordered]
