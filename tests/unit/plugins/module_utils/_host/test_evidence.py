"""Evidence commands on the target: run as given, bounded, with the privilege the guard gave each."""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from ansible_collections.sentinel.heal.plugins.module_utils._host.evidence import EvidenceConfigError, _with_privilege, read_evidence


def test_each_command_runs_in_order_without_a_shell_and_reports_its_rc_and_output() -> None:
    results = read_evidence([{"argv": ["echo", "$HOME;", "ok"], "become": False}, {"argv": ["false"], "become": False}], "become", 5)
    assert [(r["argv"], r["rc"], r["output"].strip()) for r in results] == [(["echo", "$HOME;", "ok"], 0, "$HOME; ok"), (["false"], 1, "")]


def test_what_a_command_prints_is_redacted_before_it_leaves_the_host(tmp_path: Path) -> None:
    """systemctl cat of the incident's unit prints its Environment= values."""
    unit = tmp_path / "app.service"
    unit.write_text("[Service]\nEnvironment=API_TOKEN=hunter2\nEnvironmentFile=/etc/default/app\nExecStart=/usr/bin/app\n")
    [read] = read_evidence([{"argv": ["cat", str(unit)], "become": False}], "become", 5)
    assert read["output"] == "[Service]\nEnvironment=********\nEnvironmentFile=********\nExecStart=/usr/bin/app\n"


def test_a_command_that_hangs_or_cannot_run_has_no_rc_and_says_why() -> None:
    hung, missing = read_evidence([{"argv": ["sleep", "5"], "become": False}, {"argv": ["/nonexistent/tool"], "become": False}], "become", 1)
    assert (hung["rc"], hung["output"]) == (None, "timed out after 1s")
    assert missing["rc"] is None and missing["output"].startswith("cannot run /nonexistent/tool")


@pytest.mark.skipif(os.geteuid() != 0, reason="dropping to another user needs root")
def test_as_root_through_sudo_a_command_without_become_runs_as_the_user_who_logged_in(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setenv("SUDO_USER", "nobody")
    plain, root = read_evidence([{"argv": ["id", "-un"], "become": False}, {"argv": ["id", "-un"], "become": True}], "become", 5)
    assert (plain["output"].strip(), root["output"].strip()) == ("nobody", "root")


def test_with_the_sudo_privilege_a_root_command_goes_through_sudo_without_a_password_and_others_do_not() -> None:
    assert _with_privilege(["nginx", "-t"], True, "sudo") == (["sudo", "-n", "--", "nginx", "-t"], None, "")
    assert _with_privilege(["ss", "-tln"], False, "sudo")[0] == ["ss", "-tln"]


@pytest.mark.parametrize(("commands", "timeout", "message"), [
    ([{"argv": [], "become": False}], 5, "commands[0].argv: an empty command"),
    ([{"argv": ["true"], "become": False}], 0, "timeout: 0 is out of range (1-3600)"),
])
def test_what_cannot_run_is_refused_naming_the_option_and_the_value(commands: list, timeout: int, message: str) -> None:
    with pytest.raises(EvidenceConfigError, match=message.replace("[", r"\[").replace("]", r"\]").replace("(", r"\(").replace(")", r"\)")):
        read_evidence(commands, "become", timeout)
