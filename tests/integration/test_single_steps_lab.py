"""sentinel.heal.diagnose and sentinel.heal.plan on the lab: they look and propose, and change nothing."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from conftest import Faults, run_playbook, sh

PLAYBOOK = """
- hosts: node2
  gather_facts: false
  tasks:
    - name: diagnose
      sentinel.heal.diagnose: {services: "{{ autoheal_services }}", state_dir: "{{ d }}/state", step_privilege: auto}
      become: true
      register: why
    - name: plan
      sentinel.heal.plan: {services: "{{ autoheal_services }}", state_dir: "{{ d }}/state", step_privilege: auto}
      become: true
      register: proposal
    - name: keep what they said
      ansible.builtin.copy:
        dest: "{{ d }}/said.json"
        content: "{{ {'why': why, 'proposal': proposal} | to_json }}"
        mode: "0600"
      delegate_to: localhost
"""


def test_diagnose_and_plan_look_and_propose_without_changing_anything(lab: Any, faults: Faults, tmp_path: Path) -> None:
    faults.inject("node2", "nginx-port-squat")
    squatter = sh(lab, "node2", "cat", "/run/lab-squatter.pid").strip()
    (tmp_path / "steps.yml").write_text(PLAYBOOK)
    run = run_playbook(str(tmp_path / "steps.yml"), "-e", f"d={tmp_path}", state_dir=tmp_path / "state")
    assert run.rc == 0, run.output
    said = json.loads((tmp_path / "said.json").read_text())
    assert said["why"]["changed"] is False and said["proposal"]["changed"] is False
    [diagnosis] = said["why"]["diagnoses"]
    assert diagnosis["service"] == "nginx" and diagnosis["failure_class"] == "port_conflict"
    assert "port-conflict" in diagnosis["runbooks"] and diagnosis["remembered_fix"] is None
    assert "test is successful" in diagnosis["evidence"]["nginx -t"]["stderr"] + diagnosis["evidence"]["nginx -t"]["stdout"]
    [plan] = said["proposal"]["plans"]
    assert plan["plan"]["reference"] == "port-conflict" and said["proposal"]["decision"] == "allow"
    assert [step["argv"] for step in plan["plan"]["steps"]] == [["kill", "-TERM", squatter], ["systemctl", "reset-failed", "nginx"],
                                                                ["systemctl", "start", "nginx"]]
    assert plan["path"] == ["diagnose", "plan", "guard", "check_only"]
    # nothing ran but the read-only evidence, nothing was written
    assert sh(lab, "node2", "cat", "/run/lab-squatter.pid").strip() == squatter
    assert not (tmp_path / "state" / "memory.sqlite3").exists()
    assert not (tmp_path / "state" / "runs").exists()  # the evidence was read in a module call: no ansible-runner run at all
