"""What changed since it last worked, on the lab: a healthy sweep keeps nginx's configuration on the host (root only,
names and hashes to the controller); a typo made after it is named first in the escalation, as a diff computed on the
host, and kept in the audit record; a service never seen good is escalated without a guess of what changed."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import Faults, acted, episodes, one_line, run_playbook, sh

HEAL = "playbooks/heal.yml"
KEPT = "/var/lib/sentinel-heal/known-good/nginx"


def test_a_typo_made_after_a_healthy_check_is_named_first_in_the_escalation_with_its_diff(lab: Any, faults: Faults, tmp_path: Path) -> None:
    healthy = run_playbook(HEAL, "--limit", "node2", "-v", state_dir=tmp_path)
    assert healthy.rc == 0 and "every declared service is healthy" in one_line(healthy.output), healthy.output
    # kept on the host, root only; the controller was told the files by name and hash, never their content
    assert sh(lab, "node2", "stat", "-c", "%U %a", KEPT).strip() == "root 700"
    manifest = json.loads(sh(lab, "node2", "cat", f"{KEPT}/manifest.json"))
    assert "/etc/nginx/sites-available/default" in manifest["files"] and "/etc/nginx/nginx.conf" in manifest["files"]

    faults.inject("node2", "nginx-config-error")
    run = run_playbook(HEAL, "--limit", "node2", state_dir=tmp_path)
    output = one_line(run.output)
    assert run.rc == 2, run.output
    assert "node2: nginx escalated: what changed since it last worked: /etc/nginx/sites-available/default modified" in output, output
    assert "server_name _;' '+" in output and "server_nmae _;'" in output
    [episode] = episodes(tmp_path)
    [change] = episode["evidence"]["changes"]["files"]
    assert change["path"] == "/etc/nginx/sites-available/default" and "+\tserver_nmae _;" in change["diff"]
    assert acted(tmp_path, "node2") == []  # named, never acted on: the restore is a person's


def test_a_service_never_seen_good_is_escalated_without_a_guess_of_what_changed(lab: Any, faults: Faults, tmp_path: Path) -> None:
    sh(lab, "node2", "rm", "-rf", KEPT)
    faults.inject("node2", "nginx-config-error")
    run = run_playbook(HEAL, "--limit", "node2", state_dir=tmp_path)
    output = one_line(run.output)
    assert run.rc == 2 and "node2: nginx escalated" in output and "what changed" not in output, run.output
    [episode] = episodes(tmp_path)
    assert episode["evidence"]["changes"] is None
