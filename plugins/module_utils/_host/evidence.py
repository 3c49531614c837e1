# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Running the read-only commands the controller's guard allowed as evidence, with the privilege it gave each
(standard library only)."""

from __future__ import annotations

import os
import pwd
import time

from ansible_collections.sentinel.heal.plugins.module_utils._guard.redact import redact
from ansible_collections.sentinel.heal.plugins.module_utils._host.command import run

OUTPUT_LIMIT = 4000
PRIVILEGES = ("become", "sudo")


class EvidenceConfigError(ValueError):
    """The module was given something it cannot run; the message names the option and the value."""


def read_evidence(commands, privilege, timeout):
    """Run each command ({argv, become}) in order, each within ``timeout`` seconds; one result per command with its
    ``argv`` as given, ``rc`` (None when it could not run), ``output`` and ``duration``."""
    validate_evidence(commands, timeout)
    results = []
    for command in commands:
        argv, become = list(command["argv"]), bool(command["become"])
        began = time.monotonic()
        words, demote, refused = _with_privilege(argv, become, privilege)
        if refused:
            rc, output = None, refused
        else:
            rc, output = run(words, timeout, limit=OUTPUT_LIMIT, keep="middle", demote=demote)
            output = redact(output)  # before it leaves the host: a unit's Environment= values, tokens, keys
        results.append(dict(argv=argv, become=become, rc=rc, output=output, duration=round(time.monotonic() - began, 3)))
    return results


def validate_evidence(commands, timeout, options=("commands", "timeout")):
    """Raise EvidenceConfigError, naming the option (``options``: what the caller calls the list and the timeout), for a
    timeout out of range or an empty command."""
    if not 1 <= timeout <= 3600:
        raise EvidenceConfigError("%s: %r is out of range (1-3600)" % (options[1], timeout))
    for index, command in enumerate(commands):
        if not command["argv"]:
            raise EvidenceConfigError("%s[%d].argv: an empty command" % (options[0], index))


def _with_privilege(argv, become, privilege):
    """(the words to run, who to run them as, why they cannot run): as root when the guard said become (through
    ``sudo -n --`` when the host's sudo rule is what limits root), else as the user who logged in, as a step of a
    remediation runs."""
    if become and privilege == "sudo":
        return ["sudo", "-n", "--", *argv], None, ""
    if become and os.geteuid() != 0:
        return argv, None, "needs root: the task that reads the evidence runs without become"
    if not become and os.geteuid() == 0 and os.environ.get("SUDO_USER") not in (None, "", "root"):
        return argv, _as_user(os.environ["SUDO_USER"]), ""
    return argv, None, ""


def _as_user(name):
    entry = pwd.getpwnam(name)

    def demote():
        os.initgroups(name, entry.pw_gid)
        os.setgid(entry.pw_gid)
        os.setuid(entry.pw_uid)

    return demote
