"""ledger: a service on this machine that heal.yml and approve.yml heal without the lab, through a local connection.

It is up while its marker file exists. Its runbook prints its log and puts the marker back, and the policy allows those
two steps and nothing else, so a play runs real steps through ansible-runner without touching the machine's services.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from pathlib import Path

GROUP = "ledgers"


@dataclass(frozen=True)
class Ledger:
    inventory: Path
    # the group's variables: a test adds files of its own beside the service's declaration
    group_vars: Path
    marker: Path

    @property
    def up(self) -> bool:
        return self.marker.exists()

    def stop(self) -> None:
        self.marker.unlink(missing_ok=True)


def ledger(tmp_path: Path, log: str = "", check_with: str = "") -> Ledger:
    """localhost in the group ledgers, which declares the service (down, its log holding ``log``, its check command
    ending in ``check_with``), its runbook and the policy; the memory is the state dir run_playbook passes."""
    inventory = tmp_path / "inventory"
    group_vars = inventory / "group_vars" / GROUP
    group_vars.mkdir(parents=True)
    (inventory / "hosts.yml").write_text(
        f"{GROUP}:\n  hosts:\n    localhost: {{ansible_connection: local, ansible_python_interpreter: {sys.executable}}}\n")
    runbooks = tmp_path / "runbooks"
    runbooks.mkdir()
    service_log, marker = tmp_path / "ledger.log", tmp_path / "ledger.up"
    service_log.write_text(log)
    (runbooks / "ledger.md").write_text(
        f"---\nid: ledger-marker\ntitle: ledger is up again once its marker is back\nservices: [ledger]\n"
        f"steps: ['cat {service_log}', 'touch {marker}']\npriority: 1000\n---\n")
    policy = tmp_path / "policy.yml"
    policy.write_text(
        "version: 1\nrules:\n"
        "  - {id: read-the-log, executable: cat, argv: ['{log_file}'], decision: allow}\n"
        f"  - {{id: put-the-marker-back, executable: touch, argv: ['{marker}'], decision: allow}}\n")
    (group_vars / "main.yml").write_text(
        "autoheal_become: false\nautoheal_verify_retries: 1\nautoheal_verify_delay: 0\n"
        f"autoheal_runbooks: ['{runbooks}']\nautoheal_policy_file: {policy}\n"
        f"autoheal_services: [{{name: ledger, status_check: false, check_command: 'test -e {marker}{check_with}', logs: ['{service_log}']}}]\n")
    return Ledger(inventory=inventory, group_vars=group_vars, marker=marker)
