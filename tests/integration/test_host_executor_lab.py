"""A compromised controller against the executor on a host (sentinel.heal.host on node1, a systemd host).

No controller runs here: the test is the healing account, with the executor as its only sudo rule, sending what an
attacker holding the controller would send. Every class the guard refuses is refused on the host, logged in the
host's journal, and changes nothing (checked on the host); a step the policy allows still heals, and a repair the
policy allows changes nothing outside the service's tree through a link planted in it.
"""

from __future__ import annotations

import contextlib
import json
import re
import uuid
from pathlib import Path
from typing import Any, Iterator

import fleet
import pytest
from conftest import one_line, run_playbook, sh

from ansible_collections.sentinel.heal.plugins.module_utils._host.executor import REFUSED
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import load_policy

pytestmark = pytest.mark.lab
NODE = "node1"
EXEC = "/usr/libexec/sentinel-heal/exec"


@pytest.fixture(scope="module")
def executor(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[Any]:
    # the lab installed it when it started (node1 is of the inventory's group executor): applied again, nothing changes
    state = tmp_path_factory.mktemp("host-role")
    again = run_playbook("playbooks/host.yml", "--limit", NODE, *fleet.AS_ADMIN, state_dir=state)
    assert again.rc == 0 and again.recap[NODE]["changed"] == 0, again.output
    yield lab


@contextlib.contextmanager
def broad_rule_planted(lab: Any) -> Iterator[None]:
    """The image's NOPASSWD: ALL of the healing account back on the host (the lab's executor hosts have none), as a
    provisioning would leave it."""
    sh(lab, NODE, "sh", "-c", "echo 'sentinel ALL=(ALL) NOPASSWD:ALL' > /etc/sudoers.d/sentinel && chmod 0440 /etc/sudoers.d/sentinel")
    try:
        yield
    finally:
        sh(lab, NODE, "rm", "-f", "/etc/sudoers.d/sentinel")


def as_healing_account(lab: Any, *argv: str, input_text: str | None = None, host: str = NODE) -> Any:
    return lab.run_in(host, ["runuser", "-u", "sentinel", "--", *argv], input_text=input_text, timeout=60)


def send(lab: Any, service: str, *plan: list[str], step: int = 0, version: str | None = None, host: str = NODE,
         run: str | None = None, kind: str = "step") -> tuple[int, dict[str, Any]]:
    """One request as the healing account sends it: a step in a run of its plan of its own unless ``run`` names one,
    for the failure the service has on the host now (as the controller's check would see it)."""
    version = version or load_policy().version
    request: dict[str, Any] = {"host": host, "service": service, "policy_version": version, "plan": list(plan), "step": step, "kind": kind}
    if kind == "step":
        request.update(run=run or f"lab-{uuid.uuid4().hex}", **failing_now(lab, service, host, version))
    return ask(lab, request, host)


def ask(lab: Any, request: dict[str, Any], host: str = NODE) -> tuple[int, dict[str, Any]]:
    proc = as_healing_account(lab, "sudo", "-n", EXEC, input_text=json.dumps(request), host=host)
    return proc.returncode, json.loads(proc.stdout)


def failing_now(lab: Any, service: str, host: str, version: str) -> dict[str, str]:
    """The failure class of the service's failure as the executor's check finds it (empty when healthy, or when the check
    is refused under another policy version, as the step is then), and a fingerprint of the controller's for it."""
    _rc, answer = ask(lab, {"host": host, "kind": "check", "services": [service], "policy_version": version}, host)
    failures = [] if answer["refused"] else [failure for failure in answer["check"]["failures"] if failure["name"] == service]
    return {"failure_class": failures[0]["failure_class"] if failures else "", "fingerprint": "0" * 32}


def journal(lab: Any) -> list[dict[str, Any]]:
    out = sh(lab, NODE, "journalctl", "-t", "sentinel-heal-exec", "-o", "cat", "--no-pager")
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def test_the_executor_is_the_healing_accounts_only_sudo_rule(executor: Any) -> None:
    # the lab's image gives the healing account NOPASSWD: ALL; on the hosts of the group executor it is removed when the
    # lab starts, so every suite that heals there does it with the executor as the account's one rule
    listed = as_healing_account(executor, "sudo", "-n", "-l").stdout
    rules = [line.strip() for line in listed.split("may run the following commands", 1)[1].splitlines()[1:] if line.strip()]
    assert rules == [f'(root) NOPASSWD: {EXEC} ""'], listed
    assert as_healing_account(executor, "sudo", "-n", "/bin/sh", "-c", "id").returncode != 0
    assert as_healing_account(executor, "sudo", "-n", "systemctl", "stop", "ssh").returncode != 0
    assert as_healing_account(executor, "sudo", "-n", EXEC, "--anything").returncode != 0


def test_the_host_role_fails_naming_each_other_sudo_rule_and_its_file_unless_they_are_meant_to_stay(executor: Any, tmp_path: Path) -> None:
    """An account that keeps the image's NOPASSWD: ALL can walk around the executor: the role says so, and which line."""
    with broad_rule_planted(executor):
        refused = run_playbook("playbooks/host.yml", "--limit", NODE, *fleet.AS_ADMIN, state_dir=tmp_path)
        said = one_line(refused.output)
        assert refused.rc != 0, refused.output
        assert "sentinel has sudo rules besides the executor" in said and "(ALL) NOPASSWD: ALL" in said, said
        assert "/etc/sudoers.d/sentinel:1: sentinel ALL=(ALL) NOPASSWD:ALL" in said, said
        kept = run_playbook("playbooks/host.yml", "--limit", NODE, *fleet.AS_ADMIN, "-e", "host_other_sudo_rules_stay=true", state_dir=tmp_path)
        assert kept.rc == 0, kept.output
        _rc, answer = ask(executor, {"host": NODE, "kind": "check", "services": ["nginx"], "policy_version": load_policy().version})
    assert answer["check"]["facts"]["enforcement"] == {"enforced": False, "other_rules": ["(ALL) NOPASSWD: ALL"]}, answer
    _rc, alone = ask(executor, {"host": NODE, "kind": "check", "services": ["nginx"], "policy_version": load_policy().version})
    assert alone["check"]["facts"]["enforcement"] == {"enforced": True, "other_rules": []}, alone


def test_what_a_compromised_controller_sends_is_refused_logged_and_changes_nothing(executor: Any) -> None:
    lab = executor
    sshd = sh(lab, NODE, "systemctl", "show", "-p", "MainPID", "--value", "ssh").strip()
    sh(lab, NODE, "ln", "-sfn", "/etc", "/var/lib/redis/planted")
    before = len(journal(lab))  # the decision log holds earlier tests' entries too
    try:
        attempts = {
            "a secret": ("nginx", [["cat", "/etc/shadow"]]),
            "another unit": ("nginx", [["systemctl", "cat", "redis-server"]]),
            "another instance": ("postgresql", [["systemctl", "restart", "postgresql@14-main"]]),
            "sshd's pid": ("nginx", [["kill", "-9", sshd]]),
            "through a planted link": ("redis", [["chown", "-h", "redis:redis", "/var/lib/redis/planted/"]]),
            "a service stopped for good": ("nginx", [["systemctl", "stop", "nginx"]]),
        }
        for what, (service, plan) in attempts.items():
            rc, response = send(lab, service, *plan)
            assert (rc, response["refused"]) == (REFUSED, True), (what, response)
            assert "root:" not in response.get("stdout", ""), what
        rc, response = send(lab, "nginx", ["systemctl", "restart", "nginx"], version="0123456789abcdef")
        assert rc == REFUSED and response["rule"] == "policy-version" and "apply the sentinel.heal.host role" in response["reason"]
        assert sh(lab, NODE, "systemctl", "show", "-p", "MainPID", "--value", "ssh").strip() == sshd
        assert sh(lab, NODE, "systemctl", "is-active", "nginx").strip() == "active"
        assert sh(lab, NODE, "stat", "-c", "%U:%G", "/etc").strip() == "root:root"
        refused = [entry for entry in journal(lab)[before:] if entry["decision"] == "refused" and entry["caller"] == "sentinel"]
        assert len(refused) >= len(attempts) + 1
        assert {tuple(step) for plan in attempts.values() for step in plan[1]} <= {tuple(entry["step"]) for entry in refused}
    finally:
        sh(lab, NODE, "rm", "-f", "/var/lib/redis/planted")


def test_a_step_the_policy_allows_heals_and_a_repair_never_follows_a_planted_link(executor: Any, faults: Any) -> None:
    lab = executor
    faults.inject(NODE, "nginx-killed")
    rc, response = send(lab, "nginx", ["systemctl", "start", "nginx"])
    assert (rc, response["decision"]) == (0, "allow"), response
    assert sh(lab, NODE, "systemctl", "is-active", "nginx").strip() == "active"

    faults.inject(NODE, "redis-log-dir-root-owned")
    sh(lab, NODE, "ln", "-sfn", "/etc", "/var/log/redis/planted")
    before = len(journal(lab))  # the decision log holds earlier tests' entries too
    rc, response = send(lab, "redis", ["chown", "-R", "redis:adm", "/var/log/redis"])
    assert (rc, response["decision"], response["rule"]) == (0, "allow", "give-back-ownership"), response
    assert sh(lab, NODE, "stat", "-c", "%U:%G", "/var/log/redis").strip() == "redis:adm"
    assert sh(lab, NODE, "stat", "-c", "%U:%G", "/etc").strip() == "root:root"
    assert re.fullmatch(r"redis:adm\s*", sh(lab, NODE, "stat", "-c", "%U:%G", "/var/log/redis/planted"))
    # the decision log holds other records too (a burst counted, not written): only steps name one
    assert [entry["rc"] for entry in journal(lab)[before:] if entry.get("step") == ["chown", "-R", "redis:adm", "/var/log/redis"]] == [0]
    sh(lab, NODE, "rm", "-f", "/var/log/redis/planted")


def heal(*extra: str, state_dir: Path) -> Any:
    return run_playbook("playbooks/heal.yml", "--limit", NODE, "-e", "autoheal_enforcement=host", "-e", "autoheal_target_services=nginx",
                        *extra, state_dir=state_dir)


def test_a_heal_with_enforcement_on_the_host_runs_its_steps_through_the_executor(executor: Any, faults: Any, tmp_path: Path) -> None:
    faults.inject(NODE, "nginx-killed")
    before = len(journal(executor))
    run = heal(state_dir=tmp_path)
    assert run.rc == 0, run.output
    assert "healed" in one_line(run.output)
    assert sh(executor, NODE, "systemctl", "is-active", "nginx").strip() == "active"
    ran = [entry for entry in journal(executor)[before:] if entry["service"] == "nginx"]
    assert ran and all(entry["decision"] == "allow" and entry["rc"] == 0 for entry in ran), ran


def test_a_heal_judged_under_another_policy_is_refused_on_the_host_with_the_fix(executor: Any, faults: Any, tmp_path: Path) -> None:
    """The controller's policy changed and the role was not applied again: the host runs nothing, and says why."""
    policy = tmp_path / "policy.yml"
    policy.write_text("version: 1\ninclude_default: true\nrules: []\n")
    faults.inject(NODE, "nginx-killed")
    run = heal("-e", f"autoheal_policy_file={policy}", state_dir=tmp_path / "state")
    said = one_line(run.output)
    assert run.rc != 0, run.output
    assert "the executor on the host refused the check (policy-version)" in said and "apply the sentinel.heal.host role" in said
    assert sh(executor, NODE, "systemctl", "is-active", "nginx").strip() != "active"


def test_with_the_executor_as_the_accounts_only_rule_a_killed_service_is_still_healed(executor: Any, faults: Any, tmp_path: Path) -> None:
    """Nothing of the heal becomes root: the check, every step and the verification are requests to the executor."""
    faults.inject(NODE, "nginx-killed")
    before = len(journal(executor))
    run = heal(state_dir=tmp_path)
    assert run.rc == 0 and "healed" in one_line(run.output), run.output
    assert sh(executor, NODE, "systemctl", "is-active", "nginx").strip() == "active"
    asked = [entry["step"][0] for entry in journal(executor)[before:]]
    assert asked[0] == "service_check" and asked[-1] == "service_check" and len(asked) >= 3, asked


def test_by_default_each_host_heals_through_the_executor_where_it_has_one_and_the_summary_says_where_it_was_enforced(
        executor: Any, faults: Any, tmp_path: Path) -> None:
    """autoheal_enforcement's default, auto: node1 has the executor, node3 (sysv, outside the group executor) none."""
    faults.inject(NODE, "nginx-killed")
    faults.inject("node3", "nginx-killed")
    before = len(journal(executor))
    run = run_playbook("playbooks/heal.yml", "--limit", f"{NODE},node3", "-e", "autoheal_target_services=nginx", state_dir=tmp_path)
    said = one_line(run.output)
    assert run.rc == 0 and f"{NODE}: nginx healed" in said and "node3: nginx healed" in said, run.output
    assert (f"{NODE}: enforced on the host: the executor judged every step and read, and it is all the healing account may run as "
            "root") in said, run.output
    assert ("node3: not enforced on the host: it has no executor (playbooks/host.yml installs it), so the guard on the controller alone "
            "judged every step") in said, run.output
    asked = [entry["step"][0] for entry in journal(executor)[before:]]
    assert asked[0] == "service_check" and asked[-1] == "service_check", asked  # nothing of node1's heal became root beside it

    # the image's broad rule back in place: the executor still judges, and the summary says the host is not enforced
    with broad_rule_planted(executor):
        healthy = run_playbook("playbooks/heal.yml", "--limit", NODE, "-e", "autoheal_target_services=nginx", state_dir=tmp_path)
    said = one_line(healthy.output)
    assert healthy.rc == 0 and f"{NODE}: every declared service is healthy" in said, healthy.output
    assert (f"{NODE}: not enforced on the host: the executor judged every step and read, but the healing account keeps other sudo "
            "rules beside it ((ALL) NOPASSWD: ALL") in said, healthy.output


def test_a_plan_a_person_approved_runs_on_the_host_with_their_signature_not_the_controllers_word(
        executor: Any, faults: Any, tmp_path: Path) -> None:
    """The role rolled out with a policy under which starting nginx needs a person: asked without a signature the host
    refuses it; approved with approve.yml (the lab approver's key signs), it runs, and the host's log names who. Approved
    again without the key, the controller's word alone, the host refuses the step and the plan escalates."""
    policy = tmp_path / "policy.yml"
    policy.write_text("version: 1\nrules:\n  - {id: nginx-config-test, executable: nginx, argv: [-t], decision: allow, become: true}\n")
    rolled = run_playbook("playbooks/host.yml", "--limit", NODE, *fleet.AS_ADMIN, "-e", f"autoheal_policy_file={policy}", state_dir=tmp_path)
    assert rolled.rc == 0, rolled.output
    try:
        faults.inject(NODE, "nginx-killed")
        rc, response = send(executor, "nginx", ["systemctl", "start", "nginx"], version=load_policy(policy).version)
        assert (rc, response["rule"]) == (REFUSED, "default-approve") and "signed by a key the host lists" in response["reason"], response
        state = tmp_path / "state"
        waiting = heal("-e", f"autoheal_policy_file={policy}", state_dir=state)
        assert waiting.rc == 0 and "awaits approval of plan" in waiting.output, waiting.output
        [plan_id] = re.findall(r"awaits approval of plan ([0-9a-f]{32})", waiting.output)
        before = len(journal(executor))
        approved = run_playbook("playbooks/approve.yml", "-e", f"plan_id={plan_id}", "-e", "approver=alice", state_dir=state)
        assert approved.rc == 0 and "healed" in one_line(approved.output), approved.output
        assert sh(executor, NODE, "systemctl", "is-active", "nginx").strip() == "active"
        [started] = [entry for entry in journal(executor)[before:] if entry["step"] == ["systemctl", "start", "nginx"]]
        assert (started["decision"], started["approved_by"], started["rc"]) == ("approve", "alice", 0), started

        faults.inject(NODE, "nginx-killed")
        waiting = heal("-e", f"autoheal_policy_file={policy}", state_dir=state)
        [plan_id] = re.findall(r"awaits approval of plan ([0-9a-f]{32})", waiting.output)
        unsigned = run_playbook("playbooks/approve.yml", "-e", f"plan_id={plan_id}", "-e", "approver=alice", "-e", "autoheal_approval_key=",
                                state_dir=state)
        said = one_line(unsigned.output)
        assert unsigned.rc != 0 and "escalated" in said, unsigned.output
        assert "refused by the host's executor (default-approve)" in said and "signed by a key the host lists" in said, said
        assert sh(executor, NODE, "systemctl", "is-active", "nginx").strip() != "active"
    finally:
        restored = run_playbook("playbooks/host.yml", "--limit", NODE, *fleet.AS_ADMIN, state_dir=tmp_path)
        assert restored.rc == 0, restored.output


def test_on_a_host_without_systemd_the_executor_judges_the_same_and_logs_to_its_own_file(lab: Any, tmp_path: Path) -> None:
    """node3 boots sysv (tini, init scripts, no journal): the same judge in the context gathered there, the decisions in
    /var/log/sentinel-heal/exec.log. (Its healing account keeps the image's broad rule, which other suites use there.)"""
    host = "node3"
    installed = run_playbook("playbooks/host.yml", "--limit", host, *fleet.AS_ADMIN, "-e", "host_other_sudo_rules_stay=true", state_dir=tmp_path)
    assert installed.rc == 0, installed.output
    try:
        sshd = sh(lab, host, "pgrep", "-o", "-x", "sshd").strip()
        assert sshd.isdigit(), sshd
        rc, response = send(lab, "nginx", ["kill", "-9", sshd], host=host)
        assert (rc, response["refused"]) == (REFUSED, True), response
        rc, response = send(lab, "nginx", ["cat", "/etc/shadow"], host=host)
        assert (rc, response["rule"]) == (REFUSED, "secrets-are-never-read"), response
        rc, response = send(lab, "nginx", ["service", "nginx", "status"], host=host, kind="read")
        assert (rc, response["decision"]) == (0, "allow"), response
        logged = [json.loads(line.split(" ", 1)[1]) for line in sh(lab, host, "cat", "/var/log/sentinel-heal/exec.log").splitlines()]
        assert [(entry["step"], entry["decision"]) for entry in logged if entry["step"][0] != "service_check"] == [
            (["kill", "-9", sshd], "refused"), (["cat", "/etc/shadow"], "refused"), (["service", "nginx", "status"], "allow")]
        assert sh(lab, host, "stat", "-c", "%U %a", "/var/log/sentinel-heal/exec.log").strip() == "root 600"
    finally:
        sh(lab, host, "rm", "-rf", "/etc/sudoers.d/sentinel-heal", "/usr/libexec/sentinel-heal", "/usr/lib/sentinel-heal", "/etc/sentinel-heal",
           "/var/log/sentinel-heal")
