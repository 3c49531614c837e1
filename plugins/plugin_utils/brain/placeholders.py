"""Placeholders: the values an incident gives a runbook's steps and texts (or a remembered plan's), and their filling.

A value fills one argument and never becomes two; a text for people reads "(not known)" where a value is missing; a
step whose placeholder has no value is :class:`NotApplicable`. Which placeholders there are, and what each holds, is
said with the runbook format at the top of runbooks.py.
"""

from __future__ import annotations

import re
import shlex
from typing import Mapping

from ansible_collections.sentinel.heal.plugins.module_utils._guard.context import left_over_sockets
from ansible_collections.sentinel.heal.plugins.module_utils._text import clip
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.reading import NOTHING_READ, Reading
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure, Step

PLACEHOLDER = re.compile(r"\{([a-z_]+)(?::([^{}]+))?\}")
READING_STEP_PLACEHOLDERS = frozenset({"missing_path", "missing_dir", "missing_dir_owner", "missing_dir_group", "missing_dir_mode",
                                       "package_dir", "package_dir_owner", "package_dir_group", "package_dir_mode"})
STEP_PLACEHOLDERS = frozenset({"service", "init_service", "unit", "pidfile", "stale_pidfile", "stale_socket", "stale_lock", "port",
                               "port_owner_pid", "port_owner_process", "known_good_file", "known_good_hash"}) | READING_STEP_PLACEHOLDERS
# what `service NAME VERB` and `systemctl VERB UNIT` both do
SERVICE_VERBS = frozenset({"start", "stop", "restart", "reload", "try-restart"})
# A value filled into an argument must stay one plain argument.
# values that are text for people, never an argument
TEXT_PLACEHOLDERS = frozenset({"reading", "config_error"})
_SAFE_VALUE = re.compile(r"^[A-Za-z0-9@%+=:,./_-]+$")
# a var's value: one argument, or one argument each (a list)
Value = str | tuple[str, ...]
OUTPUT_LIMIT = 600


class NotApplicable(Exception):
    """A runbook's placeholder has no value for this incident."""


def placeholder_values(failure: Failure, reading: Reading = NOTHING_READ) -> dict[str, str]:
    """Values a runbook or a remembered plan may fill in, all taken from the structured evidence and its reading."""
    values = {**reading.placeholder_values(), "service": failure.service, "init_service": failure.init_service}
    if failure.unit is not None:
        values["unit"] = failure.unit
    pidfile = failure.evidence.get("pidfile") or {}
    if failure.spec.get("pidfile"):
        values["pidfile"] = str(failure.spec["pidfile"])
    if pidfile.get("exists") and not pidfile.get("alive"):
        values["stale_pidfile"] = str(pidfile["path"])
    stale_sockets, stale_locks = left_over_sockets(failure.evidence)
    if stale_sockets:
        values["stale_socket"] = stale_sockets[0]
    if stale_locks:
        values["stale_lock"] = stale_locks[0]
    ports = failure.spec.get("ports") or []
    if ports:
        values["port"] = str(ports[0])
    invalid = reading.first("invalid_config")
    # with restores off for the service (restore_known_good), no runbook can plan one
    restorable = failure.known_good_copy(invalid.path) if invalid is not None and failure.spec.get("restore_known_good") != "off" else None
    if restorable is not None:
        values.update(known_good_file=str(restorable["path"]), known_good_hash=str(restorable["good_sha256"]))
    owners = failure.evidence.get("port_owners") or []
    if owners:
        values["port_owner_pid"] = str(owners[0]["pid"])
        values["port_owner_process"] = str(owners[0].get("process", ""))
    return {name: value for name, value in values.items() if name in TEXT_PLACEHOLDERS or _SAFE_VALUE.match(value)}


def render_step(template: str, failure: Failure, may_fail: bool = False, reading: Reading = NOTHING_READ,
                extra: Mapping[str, Value] | None = None) -> Step:
    """Split the template, then fill each argument: a value can never become two arguments. ``extra``: a runbook's
    ``vars``, filled only where each is one plain argument; a list var only an argument that is its placeholder alone,
    as one argument per item."""
    values: dict[str, Value] = {name: value for name, value in placeholder_values(failure, reading).items() if name not in TEXT_PLACEHOLDERS}
    values.update({name: value for name, value in (extra or {}).items() if all(map(_SAFE_VALUE.match, _items(value)))})

    def fill(match: re.Match[str]) -> str:
        name = match.group(1)
        value = values.get(name)
        if value is None or isinstance(value, tuple):
            raise NotApplicable(f"{{{name}}} has no value for this incident" if value is None else f"{{{name}}} is a list: an argument of its own")
        return value

    def arguments(token: str) -> tuple[str, ...]:
        whole = PLACEHOLDER.fullmatch(token)
        listed = values.get(whole.group(1)) if whole else None
        return listed if isinstance(listed, tuple) else (PLACEHOLDER.sub(fill, token),)

    argv = tuple(argument for token in shlex.split(template) for argument in arguments(token))
    return Step(template=template, argv=in_service_manager(argv, failure), may_fail=may_fail)


def _items(value: Value) -> tuple[str, ...]:
    return value if isinstance(value, tuple) else (value,)


def in_service_manager(argv: tuple[str, ...], failure: Failure) -> tuple[str, ...]:
    """`service SERVICE VERB` as the host's service manager says it: `systemctl VERB UNIT` on a systemd host."""
    if failure.unit is not None and len(argv) == 3 and argv[0] == "service" and argv[1] == failure.init_service and argv[2] in SERVICE_VERBS:
        return ("systemctl", argv[2], failure.unit)
    return argv


def render_text(template: str, failure: Failure, outputs: Mapping[str, str], reading: Reading = NOTHING_READ, *,
                strict: bool = False, extra: Mapping[str, Value] | None = None, required: frozenset[str] = frozenset()) -> str:
    """Fill a text for people. ``strict``: a value of the reading the incident lacks (or one of the ``required`` names
    of ``extra``, a runbook's vars) makes the text not applicable (an escalation about a missing path outside the
    service's directories says nothing when the path is inside them); otherwise what is missing reads "(not known)",
    never as a {placeholder}."""
    values = {**placeholder_values(failure, reading), **{name: " ".join(_items(value)) for name, value in (extra or {}).items()}}

    def fill(match: re.Match[str]) -> str:
        name, argument = match.groups()
        if name == "output" and argument:
            return clip(outputs.get(argument, "(no output)").strip(), OUTPUT_LIMIT)
        if name == "cause":
            return f'"{failure.cause}"' if failure.cause else "(the journal names no cause)"
        if strict and name in READING_STEP_PLACEHOLDERS | required and name not in values:
            raise NotApplicable(f"{{{name}}} has no value for this incident")
        return values.get(name, "(not known)")

    return PLACEHOLDER.sub(fill, template)
