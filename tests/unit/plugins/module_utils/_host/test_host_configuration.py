"""The executor's host_configuration.py, through the executor as the host runs it: the policy and the declared
services are the host's own root-owned files, read as the host declares them; another policy version, or a policy
others may write, refuses everything until the role is applied again."""

from __future__ import annotations

import json
from pathlib import Path

from host_executor import (
    check_request,
    declare,
    execute,
    request,
)

from ansible_collections.sentinel.heal.plugins.module_utils._host.executor import REFUSED


def test_another_policy_version_refuses_everything_and_says_how_to_fix_it(host: Path) -> None:
    rc, response, log = execute(host, request(["df", "-h", "/"], policy_version="0123456789abcdef"))
    assert rc == REFUSED and response["rule"] == "policy-version"
    assert "apply the sentinel.heal.host role" in response["reason"] and "0123456789abcdef" in response["reason"]
    assert log[0]["decision"] == "refused"


def test_a_check_under_another_policy_version_is_refused_until_the_role_is_applied_again(host: Path) -> None:
    rc, response, _log = execute(host, check_request(["nginx"], policy_version="0123456789abcdef"))
    assert rc == REFUSED and response["rule"] == "policy-version" and "apply the sentinel.heal.host role" in response["reason"]
    rc, response, _log = execute(host, {"host": "node1", "kind": "check", "services": ["nginx"]})
    assert rc == REFUSED and response["rule"] == "request" and response["reason"].startswith("the request lacks policy_version (str)")


def test_a_policy_others_may_write_is_not_the_hosts_and_nothing_runs(host: Path) -> None:
    (host / "policy.json").chmod(0o666)
    rc, response, _log = execute(host, request(["df", "-h", "/"]))
    assert rc == REFUSED and response["rule"] == "host-configuration" and "only root may write" in response["reason"]


def test_a_policy_document_that_is_not_one_refuses_with_its_reason_not_a_traceback(host: Path) -> None:
    (host / "policy.json").write_text(json.dumps({"layers": "none"}))
    rc, response, log = execute(host, request(["df", "-h", "/"]))
    assert rc == REFUSED and response["rule"] == "executor-error"
    assert "a policy document has a version" in response["reason"] and "Traceback" not in response["reason"]
    assert log[0]["decision"] == "refused"


def test_the_check_says_the_hosts_own_restore_setting_for_what_a_service_leaves_unsaid(host: Path) -> None:
    """The controller plans a restore within it (#52: with auto on the controller only, a restore the host sends to a
    person waits for one, never ends refused)."""
    declare(host, [{"name": "site", "status_check": False, "check_command": "false"},
                   {"name": "own", "status_check": False, "check_command": "false", "restore_known_good": "off"}],
            restore_known_good="approve")
    rc, response, _log = execute(host, check_request(["site", "own"]))
    assert rc == 0, response
    assert {failure["name"]: failure["spec"]["restore_known_good"] for failure in response["check"]["failures"]} == {
        "site": "approve", "own": "off"}
