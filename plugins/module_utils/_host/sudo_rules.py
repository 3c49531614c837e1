# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The sudo rules an account has besides the executor (standard library only).

With enforcement on the host the executor is the healing account's one rule: any other (a provisioning's
``NOPASSWD: ALL``) lets the account walk around every check the executor makes. sudo itself says which rules apply to
the account (``sudo -l -U``); the sudoers files say where each comes from.
"""

from __future__ import annotations

import grp
import os
import pwd
import re
import subprocess

SUDO = "/usr/bin/sudo"
SUDOERS = "/etc/sudoers"
_LISTED = re.compile(r"may run the following commands on [^:]*:\s*$")
_INCLUDE = re.compile(r"^\s*[@#]include(dir)?\s+(\S+)")


def other_sudo_rules(account, only_rule, timeout=30):
    """The rules sudo applies to ``account`` other than ``only_rule`` (as ``sudo -l`` prints it), each with the
    sudoers lines that may grant it (``FILE:LINE: text``): what is the account's beside the executor."""
    if not os.path.exists(SUDO):
        return []  # without sudo, no account has a rule
    completed = subprocess.run([SUDO, "-n", "-l", "-U", account], stdin=subprocess.DEVNULL, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, check=False, timeout=timeout, env=dict(PATH="/usr/sbin:/usr/bin:/sbin:/bin", LANG="C"))
    rules = [rule for rule in listed_rules(completed.stdout.decode("utf-8", "replace")) if " ".join(rule.split()) != " ".join(only_rule.split())]
    if not rules:
        return []
    # the line of the one rule grants nothing else
    command = " ".join(only_rule.split(": ", 1)[-1].split())
    granting = [line for line in granting_lines(account, _groups_of(account), SUDOERS) if not " ".join(line.split()).endswith(command)]
    return [dict(rule=rule, granted_by=granting) for rule in rules]


def listed_rules(output):
    """The rules of ``sudo -l -U ACCOUNT``'s output, one per line as it prints them (``(ALL) NOPASSWD: ALL``)."""
    rules, listing = [], False
    for line in output.splitlines():
        if _LISTED.search(line):
            listing = True
        elif listing and line.startswith((" ", "\t")) and line.strip():
            rules.append(line.strip())
        elif listing and line.strip():
            listing = False
    return rules


def granting_lines(account, groups, sudoers=SUDOERS):
    """The lines of the sudoers files (``sudoers`` and what it includes) whose user list names the account, one of its
    groups, or ALL, each as ``FILE:LINE: text``."""
    names = set([account, "ALL"]) | set("%" + group for group in groups)
    found = []
    for path, lines in _sudoers_files(sudoers):
        for number, line in enumerate(lines, 1):
            text = line.strip()
            if not text or text.startswith(("#", "Defaults", "@")) or re.match(r"^[A-Z_]+_Alias\b", text):
                continue
            users = text.split(None, 1)[0].split(",")
            if names & set(users):
                found.append("%s:%d: %s" % (path, number, text))
    return found


def _sudoers_files(sudoers):
    """(path, lines) of ``sudoers`` and each file it includes, once each, in the order sudo reads them."""
    files, seen, pending = [], set(), [sudoers]
    while pending:
        path = pending.pop(0)
        if path in seen or not os.path.isfile(path):
            continue
        seen.add(path)
        try:
            with open(path, encoding="utf-8", errors="replace") as handle:
                lines = handle.read().splitlines()
        except OSError:
            continue
        files.append((path, lines))
        for line in lines:
            match = _INCLUDE.match(line)
            if not match:
                continue
            target = os.path.join(os.path.dirname(path), match.group(2))
            if match.group(1):
                # sudo skips names that end in ~ or contain a dot
                names = sorted(os.listdir(target)) if os.path.isdir(target) else []
                pending.extend(os.path.join(target, name) for name in names if not name.endswith("~") and "." not in name)
            else:
                pending.append(target)
    return files


def _groups_of(account):
    try:
        primary = grp.getgrgid(pwd.getpwnam(account).pw_gid).gr_name
    except KeyError:
        primary = None
    return sorted(set([group.gr_name for group in grp.getgrall() if account in group.gr_mem] + ([primary] if primary else [])))
