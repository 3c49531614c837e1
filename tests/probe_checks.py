"""What the probe's tests share (module_utils/_host/): a declared service with every option the module fills in, and
service_check's check of declared services, as the module calls it."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path
from typing import Any

from ansible_collections.sentinel.heal.plugins.module_utils._host.probe import check_services


def declared(**overrides: Any) -> dict[str, Any]:
    """A service named web that declares no check until ``overrides`` give it one (the status check is off)."""
    spec: dict[str, Any] = dict(name="web", service=None, status_check=False, ports=[], address="127.0.0.1", http=None, process=None,
                                check_command=None, running_indicator=None, pidfile=None, logs=[], timeout=2.0)
    spec.update(overrides)
    return spec


def check(*specs: dict[str, Any], **params: Any) -> dict[str, Any]:
    return check_services(dict(services=list(specs), log_lines=params.get("log_lines", 20), redact_values=params.get("redact_values", []),
                               evidence_commands=params.get("evidence_commands", []), evidence_privilege="become",
                               evidence_timeout=params.get("evidence_timeout", 120)))


def bound_then_abandoned(path: Path) -> None:
    """A socket file as a killed daemon leaves it: bound by a process that exits without unlinking it."""
    subprocess.run([sys.executable, "-c", "import socket, sys; socket.socket(socket.AF_UNIX).bind(sys.argv[1])", str(path)], check=True)
