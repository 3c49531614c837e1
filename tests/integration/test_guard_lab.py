"""The guard, approvals and secrets on the lab fleet, through the playbooks users run."""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
from pathlib import Path
from typing import Any

import fleet
import pexpect
import yaml
from conftest import ROOT, Faults, RollOut, acted, commands_run, episodes, evidence_read, one_line, run_playbook, sh

HEAL = "playbooks/heal.yml"
APPROVE = "playbooks/approve.yml"
# the controller's enforcement on an executor host: steps run as root by sudo on the controller's word, the commands
# themselves (not the executor's own repairs), as the lab's operator (the healing account's one rule there is the executor)
CONTROLLER_ENFORCED = ("-e", "autoheal_enforcement=controller", *fleet.AS_ADMIN)
# A policy that lets sentinel.heal look but not act: nginx's configuration test runs, any remediation waits for a person.
STRICT_POLICY = (
    "version: 1\n"
    "rules:\n"
    "  - {id: nginx-config-test, executable: nginx, argv: [-t], decision: allow, become: true}\n"
)


def _host_state(lab: Any, host: str) -> dict[str, str]:
    """What an attack would change: accounts, sudoers, nginx's processes, its unit. (Not its pid file: the evidence
    command `nginx -t` opens it, and creates it empty when systemd removed it after the kill.)"""
    return {
        "passwd": sh(lab, host, "sha256sum", "/etc/passwd", "/etc/group"),
        "sudoers": sh(lab, host, "ls", "-l", "/etc/sudoers.d"),
        "processes": sh(lab, host, "pgrep", "-a", "nginx"),
        "nginx": sh(lab, host, "systemctl", "show", "nginx", "-p", "ActiveState,SubState,Result,NRestarts,MainPID"),
    }


def _strict_policy(roll_out: RollOut, tmp_path: Path) -> Path:
    """STRICT_POLICY, rolled out to the lab's executors: what it sends to a person runs there only with their signature."""
    policy = tmp_path / "policy.yml"
    policy.write_text(STRICT_POLICY)
    roll_out("-e", f"autoheal_policy_file={policy}")
    return policy


def _waiting_plan(lab: Any, faults: Faults, roll_out: RollOut, tmp_path: Path) -> tuple[Path, Path, str]:
    policy = _strict_policy(roll_out, tmp_path)
    state = tmp_path / "state"
    faults.inject("node1", "nginx-killed")
    run = run_playbook(HEAL, "--limit", "node1", "-e", f"autoheal_policy_file={policy}", state_dir=state)
    assert run.rc == 0 and "awaits approval of plan" in run.output, run.output
    [plan_id] = re.findall(r"awaits approval of plan ([0-9a-f]{32})", run.output)
    return policy, state, plan_id


def _plan_row(state: Path, plan_id: str) -> dict[str, Any]:
    conn = sqlite3.connect(state / "memory.sqlite3")
    conn.row_factory = sqlite3.Row
    row = dict(conn.execute("SELECT * FROM plans WHERE plan_id = ?", (plan_id,)).fetchone())
    conn.close()
    return row


def test_a_runbook_plan_with_a_hostile_step_is_blocked_and_nothing_changes(lab: Any, faults: Faults, tmp_path: Path) -> None:
    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    (runbooks / "poisoned.md").write_text(
        "---\nid: poisoned\ntitle: a runbook someone tampered with\nservices: [nginx]\nmatch: {failure_class: [not_running]}\n"
        "steps:\n  - service {init_service} start\n  - useradd -o -u 0 -g 0 backdoor\npriority: 1000\n---\n"
    )
    faults.inject("node1", "nginx-killed")
    before = _host_state(lab, "node1")
    run = run_playbook(HEAL, "--limit", "node1", "-e", json.dumps({"autoheal_runbooks": [str(runbooks)]}), state_dir=tmp_path / "state")
    assert run.rc == 2 and run.recap["node1"]["failed"] == 1, run.output
    assert "nginx escalated: the guard blocked the plan: 'useradd -o -u 0 -g 0 backdoor'" in run.output
    [episode] = episodes(tmp_path / "state")
    assert episode["outcome"] == "blocked" and [v["decision"] for v in episode["verdicts"]] == ["allow", "block"]
    assert acted(tmp_path / "state", "node1") == [] and evidence_read(tmp_path / "state", "node1") == [["nginx", "-t"]]
    assert _host_state(lab, "node1") == before
    assert "backdoor" not in sh(lab, "node1", "getent", "passwd")


def test_under_the_controllers_enforcement_a_repair_below_a_directory_the_service_account_owns_waits_for_a_person(
        lab: Any, faults: Faults, tmp_path: Path) -> None:
    """The cluster's data directory lost its mode; the class runbook would give it back, but it lies in
    /var/lib/postgresql/15, which postgres owns (service_check says so): postgres could put a link in place of main
    between the check and the step, and the step runs as root, as the command install. So the plan waits for a person,
    and nothing runs. (Through the executor, which repairs without following a link, it heals:
    test_no_follow_repair_lab.py.)"""
    faults.inject("node2", "postgres-data-dir-mode")
    run = run_playbook(HEAL, "--limit", "node2", *CONTROLLER_ENFORCED, state_dir=tmp_path / "state")
    assert run.rc == 0 and "awaits approval of plan" in run.output, run.output
    [episode] = [episode for episode in episodes(tmp_path / "state") if episode["service"] == "postgresql"]
    [repair] = [verdict for verdict in episode["verdicts"] if verdict["argv"][0] == "install"]
    assert repair["decision"] == "approve" and repair["rule"] == "directory-repair-needs-a-person", repair
    assert "another account than root could redirect" in repair["reason"]
    assert acted(tmp_path / "state", "node2") == []
    assert sh(lab, "node2", "stat", "-c", "%a", "/var/lib/postgresql/15/main").strip() == "755"


def test_a_plan_waits_is_approved_with_approve_yml_runs_once_and_verifies(lab: Any, faults: Faults, roll_out: RollOut, tmp_path: Path) -> None:
    _policy, state, plan_id = _waiting_plan(lab, faults, roll_out, tmp_path)
    assert sh(lab, "node1", "systemctl", "is-failed", "nginx").strip() == "failed"
    listing = run_playbook(APPROVE, state_dir=state)
    assert listing.rc == 0 and plan_id in listing.output and "command: systemctl start nginx" in listing.output, listing.output
    approved = run_playbook(APPROVE, "-e", f"plan_id={plan_id}", "-e", "approver=alice", state_dir=state)
    assert approved.rc == 0, approved.output
    assert "nginx healed in 1 attempt with: systemctl start nginx [plan from runbook service-not-running, approved by alice]" \
        in one_line(approved.output)
    row = _plan_row(state, plan_id)
    assert (row["status"], row["decided_by"]) == ("executed", "alice")
    last = episodes(state)[-1]
    assert (last["id"], last["outcome"], last["verified"], last["approved_by"]) == (row["executed_episode_id"], "healed", 1, "alice")
    assert "200" in sh(lab, "node1", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/")
    again = run_playbook(APPROVE, "-e", f"plan_id={plan_id}", "-e", "approver=bob", state_dir=state)
    assert again.rc == 2 and f"plan {plan_id} was already executed by alice" in again.output


def test_an_approval_is_refused_when_the_policy_changed_and_nothing_runs(lab: Any, faults: Faults, roll_out: RollOut, tmp_path: Path) -> None:
    policy, state, plan_id = _waiting_plan(lab, faults, roll_out, tmp_path)
    policy.write_text(STRICT_POLICY + "# reviewed on Monday\n")
    refused = run_playbook(APPROVE, "-e", f"plan_id={plan_id}", "-e", "approver=alice", state_dir=state)
    assert refused.rc == 2 and "the policy is now" in refused.output, refused.output
    assert _plan_row(state, plan_id)["status"] == "pending"
    assert acted(state, "node1") == [] and evidence_read(state, "node1") == [["nginx", "-t"]]  # before the plan waited
    assert sh(lab, "node1", "systemctl", "is-failed", "nginx").strip() == "failed"


def test_a_denied_plan_never_runs(lab: Any, faults: Faults, roll_out: RollOut, tmp_path: Path) -> None:
    _policy, state, plan_id = _waiting_plan(lab, faults, roll_out, tmp_path)
    denied = run_playbook(APPROVE, "-e", f"plan_id={plan_id}", "-e", "deny=true", "-e", "approver=carol",
                          "-e", "note=maintenance", state_dir=state)
    assert denied.rc == 0, denied.output
    assert _plan_row(state, plan_id)["status"] == "denied"
    refused = run_playbook(APPROVE, "-e", f"plan_id={plan_id}", "-e", "approver=dave", state_dir=state)
    assert refused.rc == 2 and "already denied by carol" in refused.output
    assert acted(state, "node1") == [] and evidence_read(state, "node1") == [["nginx", "-t"]]


def test_set_stats_hands_the_pending_plans_to_an_approve_job_like_an_awx_workflow(
        lab: Any, faults: Faults, roll_out: RollOut, tmp_path: Path) -> None:
    policy = _strict_policy(roll_out, tmp_path)
    faults.inject("node1", "nginx-killed")
    faults.inject("node2", "nginx-killed")
    env = {"ANSIBLE_SHOW_CUSTOM_STATS": "1", "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}
    # one host per batch: the role exports each batch's plans once, and set_stats adds the batches up
    heal = run_playbook(HEAL, "--limit", "node1,node2", "-e", f"autoheal_policy_file={policy}", "-e", "autoheal_serial=1",
                        state_dir=tmp_path / "state", env=env)
    assert heal.rc == 0, heal.output
    custom_stats = re.search(r"CUSTOM STATS: \*+\s+RUN: (\{.*\})", heal.output)
    assert custom_stats, heal.output
    stats = json.loads(custom_stats.group(1))
    pending = stats["autoheal_pending_plans"]
    assert sorted(plan["host"] for plan in pending) == ["node1", "node2"]
    # what AWX does with set_stats: the next job template gets them as extra variables
    approved = run_playbook(APPROVE, "-e", json.dumps({"autoheal_pending_plans": pending, "awx_user_name": "awx-admin"}),
                            state_dir=tmp_path / "state")
    assert approved.rc == 0, approved.output
    assert approved.output.count("approved by awx-admin]") == 2
    assert all("200" in sh(lab, host, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/") for host in ("node1", "node2"))


def test_interactive_approval_at_a_terminal(lab: Any, faults: Faults, roll_out: RollOut, tmp_path: Path) -> None:
    policy = _strict_policy(roll_out, tmp_path)
    faults.inject("node1", "nginx-killed")
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}")
    child = pexpect.spawn(
        "ansible-playbook", [HEAL, "-i", "inventories/lab", "--limit", "node1", "-e", f"autoheal_policy_file={policy}",
                             "-e", f"autoheal_state_dir={tmp_path / 'state'}"],
        cwd=str(ROOT), env=env, encoding="utf-8", timeout=120,
    )
    child.expect(r"Type yes to approve")
    prompt = child.before
    assert 'argv ["systemctl", "start", "nginx"] as root   [approve: no rule of the policy covers systemctl' in prompt
    child.sendline("yes")
    child.expect(pexpect.EOF)
    child.close()
    assert child.exitstatus == 0, child.before
    [episode] = episodes(tmp_path / "state")
    assert episode["outcome"] == "healed" and episode["approved_by"].startswith("interactive:")
    assert "200" in sh(lab, "node1", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/")


def test_check_mode_with_diff_shows_the_verdicts_and_changes_nothing(lab: Any, faults: Faults, tmp_path: Path) -> None:
    faults.inject("node2", "nginx-port-squat")
    run = run_playbook(HEAL, "--limit", "node2", "--check", "--diff", state_dir=tmp_path)
    assert run.rc == 0, run.output
    assert "nginx would be planned (check mode)" in run.output
    assert re.search(r"\+allow +kill -TERM \d+ +# kill-port-squatter", run.output), run.output
    assert re.search(r"\+allow +systemctl start nginx +# systemctl-control", run.output)
    assert episodes(tmp_path) == [] and not (tmp_path / "runs").exists()
    assert "SimpleHTTP" in sh(lab, "node2", "curl", "-sI", "http://127.0.0.1/")


def test_secrets_never_reach_memory_artifacts_or_output(lab: Any, faults: Faults, tmp_path: Path) -> None:
    vault_password = tmp_path / "vault-password"
    vault_password.write_text("lab-vault-password\n")
    vault_secret = "Db-Pa55-from-vault"
    encrypted = subprocess.run(
        [str(Path(sys.executable).parent / "ansible-vault"), "encrypt_string", "--vault-password-file", str(vault_password),
         vault_secret, "--name", "app_database_credentials"],
        capture_output=True, text=True, check=True,
    ).stdout
    (tmp_path / "secrets.yml").write_text(encrypted)
    api_key = "sk-labtest-0123456789abcdefghij"
    # a careless application logs its secrets into nginx's log, as nginx writes a line (its time: a line without one
    # belongs to the entry before it, which an earlier suite may have written before this failure began)
    sh(lab, "node1", "sh", "-c", f"echo \"$(date '+%Y/%m/%d %H:%M:%S') [error] 1#1: upstream auth failed for app:{vault_secret}; "
                                 "dsn postgres://app:hunter2pass@db/app\" >> /var/log/nginx/error.log")
    faults.inject("node1", "nginx-killed")
    state = tmp_path / "state"
    run = run_playbook(HEAL, "--limit", "node1", "-e", f"@{tmp_path / 'secrets.yml'}", "--vault-password-file", str(vault_password),
                       "-v", state_dir=state, env={"OPENAI_API_KEY": api_key})
    assert run.rc == 0 and "nginx healed" in run.output, run.output
    memory = "".join(path.read_bytes().decode("utf-8", "replace") for path in state.glob("memory.sqlite3*"))
    kept = [run.output, memory] + [path.read_text(errors="replace") for path in (state / "runs").rglob("*") if path.is_file()]
    for secret in (vault_secret, "hunter2pass", api_key):
        assert not [text[:80] for text in kept if secret in text], secret
    assert "upstream auth failed for app:********" in memory


def test_a_host_with_the_example_sudo_rule_runs_the_policys_steps_and_refuses_the_rest(lab: Any, faults: Faults, tmp_path: Path) -> None:
    """Least privilege on the host, the second line: sentinel may run as root only what policies/sudoers.example
    lists (steps as `sudo -n -- ARGV`, no become) and reads logs as a member of adm."""
    rule = (ROOT / "policies" / "sudoers.example").read_text()
    # the example in place of the executor's rule (set aside, put back after), as the account's only rule
    sh(lab, "node1", "mv", "/etc/sudoers.d/sentinel-heal", "/root/sentinel-heal.aside")
    lab.run_in("node1", ["sh", "-c", "cat > /etc/sudoers.d/sentinel-heal && chmod 0440 /etc/sudoers.d/sentinel-heal"], input_text=rule)
    try:
        assert "parsed OK" in sh(lab, "node1", "visudo", "-cf", "/etc/sudoers.d/sentinel-heal")
        sh(lab, "node1", "usermod", "-aG", "adm", "sentinel")
        # redis-server's init script answers `status` only to root: without become its port, process and ping tell
        services = yaml.safe_load((ROOT / "inventories" / "lab" / "group_vars" / "lab.yml").read_text())["autoheal_services"]
        services = [dict(spec, status_check=False) if spec["name"] == "redis" else spec for spec in services]
        # the sudoers rule is the controller's way (enforcement on the host has the executor as the one rule instead)
        least = ("-e", "autoheal_step_privilege=sudo", "-e", "autoheal_become=false", "-e", json.dumps({"autoheal_services": services}),
                 "-e", "autoheal_enforcement=controller")
        faults.inject("node1", "nginx-killed")
        run = run_playbook(HEAL, "--limit", "node1", *least, state_dir=tmp_path / "state")
        assert run.rc == 0 and "nginx healed in 1 attempt with: systemctl start nginx" in one_line(run.output), run.output
        assert [argv[:3] for _purpose, argv in commands_run(tmp_path / "state", "node1")] == [["sudo", "-n", "--"]]  # start
        # nginx -t was read through the same sudo rule, as the user who logged in, not as root
        [episode] = episodes(tmp_path / "state")
        assert [(r["argv"], r["rc"]) for r in episode["results"]["evidence"].values()] == [(["nginx", "-t"], 0)], episode["results"]
        assert "200" in sh(lab, "node1", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/")

        # a policy that wrongly allows reading the shadow file, and a runbook that asks for it: the host says no
        policy = tmp_path / "careless.yml"
        policy.write_text("version: 1\ninclude_default: true\nrules:\n"
                          "  - {id: careless, executable: cat, argv: [/etc/shadow], decision: allow, become: true}\n")
        runbooks = tmp_path / "runbooks"
        runbooks.mkdir()
        (runbooks / "careless.md").write_text(
            "---\nid: careless\ntitle: reads what it should not\nservices: [nginx]\nmatch: {failure_class: [not_running]}\n"
            "steps:\n  - cat /etc/shadow\n  - service {init_service} start\npriority: 1000\n---\n")
        faults.inject("node1", "nginx-killed")
        careless = run_playbook(HEAL, "--limit", "node1", *least, "-e", f"autoheal_policy_file={policy}", "-e", "autoheal_max_attempts=1",
                                "-e", json.dumps({"autoheal_runbooks": [str(runbooks)]}), state_dir=tmp_path / "careless")
        [episode] = episodes(tmp_path / "careless")
        shadow_step = episode["results"]["steps"][0]
        assert (shadow_step["argv"], shadow_step["status"]) == (["cat", "/etc/shadow"], "failed"), episode["results"]
        assert "a password is required" in shadow_step["stderr"] and shadow_step["stdout"] == ""
        assert "root:" not in careless.output
    finally:
        lab.run_in("node1", ["sh", "-c", "mv /root/sentinel-heal.aside /etc/sudoers.d/sentinel-heal && gpasswd -d sentinel adm"])
