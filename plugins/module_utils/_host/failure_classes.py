# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What kind of failure a failing service's checks and evidence show (standard library only): the one class the
controller's runbooks and plans are chosen by."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.module_utils._host import systemd as _systemd
from ansible_collections.sentinel.heal.plugins.module_utils._host.runtime_files import keeps_from_starting

FAILURE_CLASSES = ("not_installed", "masked", "port_conflict", "auto_restart", "start_limit_hit", "restart_loop", "stale_pidfile", "stale_socket",
                   "not_running", "unhealthy")
# the failures no evidence is read for: a unit a person masked, one systemd restarts by itself
NOT_READ_FOR = ("masked", "auto_restart")


def classify(checks, evidence, process_name, managed):
    if managed and not any(evidence["installed"].values()) and not evidence["processes"]:
        return "not_installed"
    unit_class = _systemd.classify(evidence["unit"]) if evidence["unit"] else None
    if unit_class == "masked":
        return unit_class
    if any(owner["process"] != process_name[:15] and not owner.get("own") for owner in evidence["port_owners"]):
        return "port_conflict"
    if unit_class:
        return unit_class
    pidfile = evidence["pidfile"]
    if pidfile and pidfile["exists"] and not pidfile["alive"]:
        return "stale_pidfile"
    if any(keeps_from_starting(socket_info) for socket_info in evidence["sockets"]):
        return "stale_socket"
    if any(not check["ok"] for check in checks if check["kind"] in ("service", "process")):
        return "not_running"
    return "unhealthy"
