"""service_check's probe, the check of every declared service (module_utils/_host/probe.py): evidence commands read in
the same call, for a failing service only, and none while a person's maintenance marker is on the host. Each room's own
tests beside it: test_checks.py, test_declaration.py, test_gather.py, test_logs.py, test_filesystem.py,
test_runtime_files.py, test_installation.py, test_failure_classes.py; the settle window: test_settle.py."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from local_llm import free_port
from probe_checks import check, declared

from ansible_collections.sentinel.heal.plugins.module_utils._host import probe as _probe


def test_evidence_commands_are_read_for_a_failing_service_only_in_the_same_call(web: dict[str, Any], tmp_path: Path) -> None:
    marker = tmp_path / "read"
    commands = [{"service": "down", "argv": ["sh", "-c", f"echo read >> {marker}; echo the config is fine"], "become": False},
                {"service": "up", "argv": ["sh", "-c", f"echo up >> {marker}"], "become": False}]
    result = check(declared(name="up", ports=[web["port"]]), declared(name="down", ports=[free_port()]), evidence_commands=commands)
    [down] = result["failures"]
    [read] = down["evidence"]["commands"]
    assert (read["argv"][0], read["become"], read["rc"], read["output"].strip()) == ("sh", False, 0, "the config is fine")
    assert marker.read_text() == "read\n"  # the healthy service's command never ran
    assert "commands" not in result["services"][0].get("evidence", {})


def test_nothing_is_read_ahead_while_a_maintenance_marker_is_on_the_host(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """The marker says hands off; which services it covers is the controller's to decide, so no service is read. (Where
    the marker lies and how it is read: test_maintenance.py; here it is the one a person left.)"""
    monkeypatch.setattr(_probe, "read_marker", lambda: {"reason": "disk swap", "services": ["nginx"]})
    commands = [{"service": "down", "argv": ["sh", "-c", f"echo read >> {tmp_path / 'read'}"], "become": False}]
    [down] = check(declared(name="down", ports=[free_port()]), evidence_commands=commands)["failures"]
    assert "commands" not in down["evidence"] and not (tmp_path / "read").exists()
