"""What changed since it last worked, on the lab: a healthy sweep keeps nginx's configuration on the host (root only,
names and hashes to the controller); a typo made after it is, by default, put back only once a person approved the diff
of what is put back (approve.yml), the typo kept aside byte for byte where the run's record says; with
``restore_known_good: auto`` it is put back unattended; with ``off`` the escalation leads with the diff computed on the
host. A service never seen good is escalated without a guess of what changed. A start that fails after a package
upgrade waits for a person with the version apt kept, and heals once approved."""

from __future__ import annotations

import json
import re
from pathlib import Path
from typing import Any

import pytest
from conftest import KNOWN_GOOD_DIR, Faults, RollOut, acted, episodes, one_line, run_playbook, sh

HEAL = "playbooks/heal.yml"
APPROVE = "playbooks/approve.yml"
KEPT = f"{KNOWN_GOOD_DIR}/nginx"
SITE = "/etc/nginx/sites-available/default"
RESTORE = f"sentinel-heal-restore {SITE}"


def test_with_restores_off_a_typo_made_after_a_healthy_check_is_named_first_in_the_escalation_with_its_diff(
        lab: Any, faults: Faults, tmp_path: Path) -> None:
    healthy = run_playbook(HEAL, "--limit", "node2", "-v", state_dir=tmp_path)
    assert healthy.rc == 0 and "every declared service is healthy" in one_line(healthy.output), healthy.output
    # kept on the host, root only; the controller was told the files by name and hash, never their content
    assert sh(lab, "node2", "stat", "-c", "%U %a", KEPT).strip() == "root 700"
    manifest = json.loads(sh(lab, "node2", "cat", f"{KEPT}/manifest.json"))
    assert "/etc/nginx/sites-available/default" in manifest["files"] and "/etc/nginx/nginx.conf" in manifest["files"]

    faults.inject("node2", "nginx-config-error")
    run = run_playbook(HEAL, "--limit", "node2", "-e", "autoheal_restore_known_good=off", state_dir=tmp_path)
    output = one_line(run.output)
    assert run.rc == 2, run.output
    assert "node2: nginx escalated: what changed since it last worked: /etc/nginx/sites-available/default modified" in output, output
    assert "server_name _;' '+" in output and "server_nmae _;'" in output
    [episode] = episodes(tmp_path)
    [change] = episode["evidence"]["changes"]["files"]
    assert change["path"] == "/etc/nginx/sites-available/default" and "+\tserver_nmae _;" in change["diff"]
    assert acted(tmp_path, "node2") == []  # named, never acted on: restores are off


# node2 puts the file back through the executor on the host; node3 keeps the direct path (Ansible's become, no
# executor), where the module known_good_restore does the same. With auto on the controller only, node2's own setting
# (the host role's default, approve) holds: the restore waits for a person as well, never ends refused by the host.
@pytest.mark.parametrize(("host", "controller"), [("node2", ()), ("node2", ("-e", "autoheal_restore_known_good=auto")), ("node3", ())],
                         ids=["executor", "executor-auto-on-the-controller-only", "direct"])
def test_a_typo_made_after_a_healthy_check_waits_with_the_diff_is_put_back_once_approved_and_kept_aside_byte_for_byte(
        lab: Any, faults: Faults, tmp_path: Path, host: str, controller: tuple[str, ...]) -> None:
    state = tmp_path / "state"
    assert run_playbook(HEAL, "--limit", host, state_dir=state).rc == 0
    faults.inject(host, "nginx-config-error")
    edited = sh(lab, host, "base64", "-w0", SITE)
    waiting = run_playbook(HEAL, "--limit", host, *controller, state_dir=state)
    said = one_line(waiting.output)
    assert waiting.rc == 0 and "nginx awaits approval of plan" in said and RESTORE in said, waiting.output
    # what it puts back is in the job's output too, for the person who approves where no terminal showed the diff
    assert f"puts back {SITE}: " in said and "server_name _;" in said.split(f"puts back {SITE}: ", 1)[1], said
    [plan_id] = re.findall(r"awaits approval of plan ([0-9a-f]{32})", said)
    assert acted(state, host) == [] and sh(lab, host, "base64", "-w0", SITE) == edited
    # what a person sees before approving: the diff of what is put back, from the file as it is now
    listing = run_playbook(APPROVE, state_dir=state)
    assert listing.rc == 0 and "puts_back" in listing.output, listing.output
    assert re.search(r"\n *-\s+server_nmae _;\n *\+\s+server_name _;\n", listing.output), listing.output

    approved = run_playbook(APPROVE, "-e", f"plan_id={plan_id}", "-e", "approver=alice", *controller, state_dir=state)
    assert approved.rc == 0 and f"nginx healed in 1 attempt with: {RESTORE}" in one_line(approved.output), approved.output
    assert "200" in sh(lab, host, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/")
    assert sh(lab, host, "cmp", SITE, "/var/backups/lab-nginx-default") == ""
    # the person's edit is not lost: byte for byte where the episode's record of the step says
    [restored] = [step for step in episodes(state)[-1]["results"]["steps"] if step["argv"][0] == "sentinel-heal-restore"]
    done = json.loads(restored["stdout"])
    assert done["restored"] and done["aside"].startswith(f"{KEPT}/aside/") and done["test"] == {**done["test"], "argv": ["nginx", "-t"], "rc": 0}
    assert sh(lab, host, "base64", "-w0", done["aside"]) == edited
    assert acted(state, host)[0] == ("remediation", restored["argv"])


def test_with_restores_auto_the_typo_is_put_back_unattended(lab: Any, faults: Faults, roll_out: RollOut, tmp_path: Path) -> None:
    roll_out("-e", "autoheal_restore_known_good=auto", hosts="node2")
    state = tmp_path / "state"
    assert run_playbook(HEAL, "--limit", "node2", state_dir=state).rc == 0
    faults.inject("node2", "nginx-config-error")
    run = run_playbook(HEAL, "--limit", "node2", "-e", "autoheal_restore_known_good=auto", state_dir=state)
    assert run.rc == 0 and f"nginx healed in 1 attempt with: {RESTORE}" in one_line(run.output), run.output
    assert sh(lab, "node2", "cmp", SITE, "/var/backups/lab-nginx-default") == ""


def test_a_service_never_seen_good_is_escalated_without_a_guess_of_what_changed(lab: Any, faults: Faults, tmp_path: Path) -> None:
    sh(lab, "node2", "rm", "-rf", KEPT)
    faults.inject("node2", "nginx-config-error")
    run = run_playbook(HEAL, "--limit", "node2", state_dir=tmp_path)
    output = one_line(run.output)
    assert run.rc == 2 and "node2: nginx escalated" in output and "what changed" not in output, run.output
    [episode] = episodes(tmp_path)
    assert episode["evidence"]["changes"] is None


CANARY = "canary-7f3a9c2e51"


@pytest.mark.parametrize("fault, host, service, changed, broken, secret, answers", [
    # an unknown directive appended to redis.conf (a conffile of redis-server): systemd restarts it until its start limit
    ("redis-restart-loop", "node1", "redis", "/etc/redis/redis.conf", "lab-unknown-directive yes", f"requirepass {CANARY}",
     (["redis-cli", "ping"], "PONG")),
    # a setting PostgreSQL refuses, in the cluster's postgresql.conf (declared in the lab's configs)
    ("postgres-bad-parameter", "node2", "postgresql", "/etc/postgresql/15/main/postgresql.conf", "shared_buffers = 'lots'",
     f"# the replica's password = {CANARY}", (["pg_isready", "-h", "127.0.0.1"], "accepting connections")),
], ids=["redis", "postgresql"])  # ids of their own: the secret must not ride along in the test's name (PYTEST_CURRENT_TEST)
def test_a_broken_edit_of_redis_or_postgresql_after_a_healthy_check_is_put_back_once_approved_and_its_secret_stays_on_the_host(
        lab: Any, faults: Faults, tmp_path: Path, fault: str, host: str, service: str, changed: str, broken: str, secret: str,
        answers: tuple[list[str], str]) -> None:
    state = tmp_path / "state"
    assert run_playbook(HEAL, "--limit", host, state_dir=state).rc == 0
    faults.inject(host, fault)
    # the same edit wrote a secret: the diffs the controller is shown are redacted on the host
    lab.run_in(host, ["sh", "-c", f"echo \"$0\" >> {changed}", secret], timeout=30)
    edited = sh(lab, host, "base64", "-w0", changed)
    waiting = run_playbook(HEAL, "--limit", host, state_dir=state)
    said = one_line(waiting.output)
    assert waiting.rc == 0 and f"{service} awaits approval of plan" in said and f"sentinel-heal-restore {changed}" in said, waiting.output
    [plan_id] = re.findall(r"awaits approval of plan ([0-9a-f]{32})", said)
    approved = run_playbook(APPROVE, "-e", f"plan_id={plan_id}", "-e", "approver=alice", state_dir=state)
    assert approved.rc == 0 and f"{service} healed in 1 attempt with: sentinel-heal-restore {changed}" in one_line(approved.output), \
        approved.output
    command, answer = answers
    assert answer in sh(lab, host, *command)
    assert broken not in sh(lab, host, "cat", changed)
    [restored] = [step for step in episodes(state)[-1]["results"]["steps"] if step["argv"][0] == "sentinel-heal-restore"]
    assert sh(lab, host, "base64", "-w0", json.loads(restored["stdout"])["aside"]) == edited
    # the secret is in the edit kept aside on the host, and nowhere the controller keeps or shows anything
    assert "********" in waiting.output
    assert all(CANARY not in text for text in (waiting.output, approved.output))
    assert [path for path in state.rglob("*") if path.is_file() and CANARY.encode() in path.read_bytes()] == []


@pytest.mark.parametrize("fault, host, service, changed, answers", [
    ("redis-restart-loop", "node1", "redis", "/etc/redis/redis.conf", (["redis-cli", "ping"], "PONG")),
    ("postgres-bad-parameter", "node2", "postgresql", "/etc/postgresql/15/main/postgresql.conf",
     (["pg_isready", "-h", "127.0.0.1"], "accepting connections")),
], ids=["redis", "postgresql"])
def test_a_broken_edit_is_named_with_restores_off_and_with_auto_put_back_unattended_where_a_configuration_test_checks_it(
        lab: Any, faults: Faults, roll_out: RollOut, tmp_path: Path, fault: str, host: str, service: str, changed: str,
        answers: tuple[list[str], str]) -> None:
    """The lab declares PostgreSQL's configuration test (postgres -C); redis has none, so even with auto a person
    approves the restore of its file: nothing would check it before redis reads it."""
    roll_out("-e", "autoheal_restore_known_good=auto", hosts=host)
    state = tmp_path / "state"
    assert run_playbook(HEAL, "--limit", host, state_dir=state).rc == 0
    faults.inject(host, fault)
    named = run_playbook(HEAL, "--limit", host, "-e", "autoheal_restore_known_good=off", state_dir=state)
    said = one_line(named.output)
    assert named.rc == 2 and f"{host}: {service} escalated: what changed since it last worked: {changed} modified" in said, named.output
    assert acted(state, host) == []
    healed = run_playbook(HEAL, "--limit", host, "-e", "autoheal_restore_known_good=auto", state_dir=state)
    if service == "redis":
        said = one_line(healed.output)
        assert healed.rc == 0 and f"{service} awaits approval of plan" in said and "no configuration test can check the file first" in said, \
            healed.output
        [plan_id] = re.findall(r"awaits approval of plan ([0-9a-f]{32})", said)
        healed = run_playbook(APPROVE, "-e", f"plan_id={plan_id}", "-e", "approver=alice", state_dir=state)
    assert healed.rc == 0 and f"{service} healed in 1 attempt with: sentinel-heal-restore {changed}" in one_line(healed.output), \
        healed.output
    command, answer = answers
    assert answer in sh(lab, host, *command)


def test_a_start_that_fails_after_a_package_upgrade_waits_with_the_version_apt_kept_and_heals_once_approved(
        lab: Any, faults: Faults, tmp_path: Path) -> None:
    state = tmp_path / "state"
    version = sh(lab, "node2", "dpkg-query", "-W", "-f=${Version}", "nginx-common").strip()
    assert run_playbook(HEAL, "--limit", "node2", state_dir=state).rc == 0
    faults.inject("node2", "nginx-package-upgrade-broken")
    cached = f"/var/cache/apt/archives/nginx-common_{version}_all.deb"
    waiting = run_playbook(HEAL, "--limit", "node2", state_dir=state)
    said = one_line(waiting.output)
    assert waiting.rc == 0 and "nginx awaits approval of plan" in said and f"dpkg -i {cached}" in said, waiting.output
    [episode] = episodes(state)
    [upgrade] = [change for change in episode["evidence"]["changes"]["packages"] if change["package"] == "nginx-common"]
    assert (upgrade["action"], upgrade["before"], upgrade["after"], upgrade["cached"]) == ("upgrade", version, f"{version}+lab1", cached)
    assert episode["verdicts"][0]["rule"] == "downgrade-to-the-cached-version"
    [plan_id] = re.findall(r"awaits approval of plan ([0-9a-f]{32})", said)
    approved = run_playbook(APPROVE, "-e", f"plan_id={plan_id}", "-e", "approver=alice", state_dir=state)
    assert approved.rc == 0 and f"nginx healed in 1 attempt with: dpkg -i {cached}" in one_line(approved.output), approved.output
    assert sh(lab, "node2", "dpkg-query", "-W", "-f=${Version}", "nginx-common").strip() == version
    assert "200" in sh(lab, "node2", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/")
