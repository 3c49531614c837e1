"""The executor's plan_runs.py, through the executor as the host runs it: a plan's steps run in order, once each,
under one run of one plan; a step that cannot run alone runs with the piece that makes it safe; a plan left halfway
is reported by the next check."""

from __future__ import annotations

import json
import time
from pathlib import Path

import pytest
from host_executor import (
    NGINX,
    check_request,
    execute,
    for_the_failure_now,
    request,
)

from ansible_collections.sentinel.heal.plugins.module_utils._host.executor import REFUSED
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import host_policy_document, load_policy


def test_a_plans_steps_run_in_order_once_each_and_a_run_is_one_plan(host: Path) -> None:
    plan = (["df", "-h", "/"], ["df", "-i", "/"])
    rc, response, _log = execute(host, request(*plan, step=1, run="r1"))
    assert rc == REFUSED and response["rule"] == "plan-order" and "before step 1 of its plan has run" in response["reason"]
    rc, first, _log = execute(host, request(*plan, step=0, run="r1"))
    assert rc == 0 and "Filesystem" in first["stdout"] and "ran_before" not in first
    rc, again, _log = execute(host, request(*plan, step=0, run="r1"))
    assert rc == 0 and again["ran_before"] is True and again["stdout"] == first["stdout"]
    rc, response, _log = execute(host, request(["df", "-h", "/"], ["cat", "/etc/hostname"], step=1, run="r1"))
    assert rc == REFUSED and response["rule"] == "plan-run"
    rc, second, _log = execute(host, request(*plan, step=1, run="r1"))
    assert rc == 0 and "Inodes" in second["stdout"]
    rc, response, _log = execute(host, {key: value for key, value in request(*plan).items() if key != "run"})
    assert rc == REFUSED and "field: run" in response["reason"]


def test_a_plan_left_halfway_is_reported_by_the_next_check(host: Path) -> None:
    from ansible_collections.sentinel.heal.plugins.module_utils._host.plan_runs import unfinished_runs
    from ansible_collections.sentinel.heal.plugins.module_utils._host.requests import MAX_TIMEOUT
    execute(host, request(["df", "-h", "/"], ["df", "-i", "/"], run="left"))
    execute(host, request(["df", "-h", "/"], run="done"))
    [left] = unfinished_runs(str(host.parent / "approvals"), ["nginx"], time.time() + MAX_TIMEOUT + 1)
    assert (left["run"], left["service"], left["ran"]) == ("left", "nginx", [0])
    assert unfinished_runs(str(host.parent / "approvals"), ["nginx"], time.time()) == []  # still within a step's time
    rc, response, _log = execute(host, check_request(["nginx"]))
    assert rc == 0 and response["check"]["facts"]["unfinished_plans"] == []


def test_a_stop_sent_without_the_start_that_makes_it_safe_runs_with_that_start(
        host: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    """Step 1 of [stop nginx, start nginx] alone would leave nginx stopped: the host runs the piece its plan's rules
    allow alone (both steps), in one request, and answers the start from what it did when it is sent."""
    from ansible_collections.sentinel.heal.plugins.module_utils._host import executor as _executor
    ran: list[list[str]] = []
    monkeypatch.setattr(_executor, "run_argv", lambda argv, become, timeout: ran.append(list(argv)) or dict(rc=0, stdout="", stderr=""))
    plan = [["systemctl", "stop", "nginx"], ["systemctl", "start", "nginx"]]
    approvals = str(host.parent / "approvals")
    answer = _executor.handle(for_the_failure_now(host, request(*plan, step=0, run="cut")), str(host), approvals)
    assert ran == plan and answer["ran_with_it"] == [{"step": 1, "argv": plan[1], "rc": 0, "refused": False}], answer
    answer = _executor.handle(for_the_failure_now(host, request(*plan, step=1, run="cut")), str(host), approvals)
    assert ran == plan and answer["ran_before"] is True
    # a plan whose stop nothing undoes runs no piece of it
    answer = _executor.handle(for_the_failure_now(host, request(plan[0], ["df", "-h", "/"], step=0, run="stopped")), str(host), approvals)
    assert answer["refused"] and ran == plan


def test_a_directory_made_then_given_its_packages_owner_and_mode_is_repaired_on_the_host_as_one_piece(host: Path, tmp_path: Path) -> None:
    """[mkdir -p D, chown OWNER:GROUP D, chmod MODE D] ends as the package makes D, and runs unattended; its mkdir alone
    would leave D root's with mode 0755, so the host does the three repairs itself, in the one request of step 1."""
    from ansible_collections.sentinel.heal.plugins.module_utils._host import executor as _executor
    directory = tmp_path / "srv" / "nginx-cache"
    directory.parent.mkdir()
    own_policy = tmp_path / "policy.yml"
    own_policy.write_text(f"version: 1\ninclude_default: true\npackage_paths:\n"
                          f"  - {{services: [nginx], path: {directory}, owner: nobody, group: nogroup, mode: '0750'}}\n")
    (host / "policy.json").write_text(json.dumps(host_policy_document(own_policy)))
    (host / "services.json").write_text(json.dumps({"host": "node1", "services": [dict(NGINX, paths=[str(directory)])]}))
    version = load_policy(own_policy).version
    plan = [["mkdir", "-p", str(directory)], ["chown", "nobody:nogroup", str(directory)], ["chmod", "0750", str(directory)]]
    approvals = str(host.parent / "approvals")
    alone = _executor.handle(for_the_failure_now(host, request(plan[0], step=0, run="alone", policy_version=version)), str(host), approvals)
    assert alone["refused"] and alone["rule"] == "plan-leaves-directory-unlike-its-package" and not directory.exists()
    answer = _executor.handle(for_the_failure_now(host, request(*plan, step=0, run="whole", policy_version=version)), str(host), approvals)
    assert answer["rc"] == 0 and [ran["rc"] for ran in answer["ran_with_it"]] == [0, 0], answer
    info = directory.stat()
    assert (info.st_uid, info.st_gid, oct(info.st_mode & 0o7777)) == (65534, 65534, "0o750")
