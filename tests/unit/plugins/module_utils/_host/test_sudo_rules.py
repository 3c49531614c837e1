"""The healing account's sudo rules besides the executor: sudo's own listing, and the sudoers lines that grant them."""

from __future__ import annotations

from pathlib import Path

from ansible_collections.sentinel.heal.plugins.module_utils._host import sudo_rules as _sudo_rules
from ansible_collections.sentinel.heal.plugins.module_utils._host.host_configuration import EXECUTOR_RULE

LISTING = """Matching Defaults entries for sentinel on node1:
    env_reset, mail_badpass, secure_path=/usr/local/sbin\\:/usr/local/bin\\:/usr/sbin\\:/usr/bin\\:/sbin\\:/bin

Runas and Command-specific defaults for sentinel:
    Defaults!/usr/bin/ls timestamp_timeout=5

User sentinel may run the following commands on node1:
    (ALL) NOPASSWD: ALL
    (root) NOPASSWD: /usr/libexec/sentinel-heal/exec ""
"""


def fake_sudo(empty_host: Path, output: str) -> None:
    """sudo on the empty host: a program that prints what sudo -l -U would."""
    program = Path(_sudo_rules.SUDO)
    program.parent.mkdir(parents=True, exist_ok=True)
    program.write_text("#!/bin/sh\ncat <<'EOF'\n" + output + "EOF\n")
    program.chmod(0o755)


# an account this machine does not have: in no group of its, so only what the test's sudoers say about it counts
ACCOUNT = "sentinel-heal-test-account"


def test_the_listing_gives_each_rule_and_nothing_of_the_defaults() -> None:
    assert _sudo_rules.listed_rules(LISTING) == ["(ALL) NOPASSWD: ALL", '(root) NOPASSWD: /usr/libexec/sentinel-heal/exec ""']
    assert _sudo_rules.listed_rules("User sentinel is not allowed to run sudo on node1.\n") == []


def test_a_provisioning_rule_beside_the_executor_is_named_with_the_line_that_grants_it(empty_host: Path) -> None:
    account = ACCOUNT
    fake_sudo(empty_host, LISTING)
    sudoers = Path(_sudo_rules.SUDOERS)
    (sudoers.parent / "sudoers.d").mkdir(parents=True)
    sudoers.write_text("Defaults env_reset\nroot ALL=(ALL:ALL) ALL\nUser_Alias OPS = alice\nALL ALL=(root) /usr/bin/id\n@includedir sudoers.d\n")
    (sudoers.parent / "sudoers.d" / "provisioning").write_text(f"# from the image\n{account} ALL=(ALL) NOPASSWD:ALL\n")
    (sudoers.parent / "sudoers.d" / "sentinel-heal").write_text(f'{account} ALL=(root) NOPASSWD: /usr/libexec/sentinel-heal/exec ""\n')
    (sudoers.parent / "sudoers.d" / "README.dpkg-old").write_text(f"{account} ALL=(ALL) ALL\n")  # sudo skips names with a dot
    [other] = _sudo_rules.other_sudo_rules(account, EXECUTOR_RULE)
    assert other["rule"] == "(ALL) NOPASSWD: ALL"
    assert other["granted_by"] == [f"{sudoers}:4: ALL ALL=(root) /usr/bin/id",
                                   f"{sudoers.parent}/sudoers.d/provisioning:2: {account} ALL=(ALL) NOPASSWD:ALL"]


def test_a_rule_of_a_group_the_account_is_in_is_found_and_one_of_another_group_is_not(tmp_path: Path) -> None:
    sudoers = tmp_path / "sudoers"
    sudoers.write_text("%ops ALL=(ALL) NOPASSWD: ALL\n%dba ALL=(postgres) ALL\nalice,sentinel ALL=(ALL) ALL\n#include extra\n")
    (tmp_path / "extra").write_text("sentinel ALL=(root) /usr/bin/systemctl\n")
    assert _sudo_rules.granting_lines("sentinel", ["ops"], str(sudoers)) == [
        f"{sudoers}:1: %ops ALL=(ALL) NOPASSWD: ALL", f"{sudoers}:3: alice,sentinel ALL=(ALL) ALL",
        f"{tmp_path}/extra:1: sentinel ALL=(root) /usr/bin/systemctl"]


def test_the_executor_alone_is_no_other_rule_and_a_host_without_sudo_has_none(empty_host: Path) -> None:
    account = ACCOUNT
    assert _sudo_rules.other_sudo_rules(account, EXECUTOR_RULE) == []  # no sudo on the empty host
    fake_sudo(empty_host, 'User sentinel may run the following commands on node1:\n    (root) NOPASSWD:   /usr/libexec/sentinel-heal/exec ""\n')
    assert _sudo_rules.other_sudo_rules(account, EXECUTOR_RULE) == []
