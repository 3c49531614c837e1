"""A repair below a directory a service account owns, on a host with the executor (node2, of the inventory's group
executor): PostgreSQL's data directory lies in /var/lib/postgresql/15, which postgres owns. Where the controller runs
the step as the command, postgres could put a link in place of main between the check and the step, and root's install
would follow it, so the repair waits for a person (test_guard_lab.py). The executor does the repair itself, from / one
directory at a time without following a link: it heals unattended, and a link swapped in is refused on the host.
"""

from __future__ import annotations

import json
import uuid
from pathlib import Path
from typing import Any

import pytest
from conftest import Faults, episodes, one_line, run_playbook, sh
from test_host_executor_lab import ask, failing_now

from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import load_policy

pytestmark = pytest.mark.lab
NODE = "node2"
CLUSTER = "/var/lib/postgresql/15"
DATA = f"{CLUSTER}/main"
# the class runbook service-directory-permissions for it, as the heal plans it
REPAIR = ["install", "-d", "-m", "0700", "-o", "postgres", "-g", "postgres", DATA]
PLAN = [REPAIR, ["systemctl", "reset-failed", "postgresql@15-main"], ["systemctl", "start", "postgresql@15-main"]]
# root's directory a planted link leads to: what a followed repair would hand to postgres
OUTSIDE = "/srv/root-only"


def journal(lab: Any) -> list[dict[str, Any]]:
    out = sh(lab, NODE, "journalctl", "-t", "sentinel-heal-exec", "-o", "cat", "--no-pager")
    return [json.loads(line) for line in out.splitlines() if line.startswith("{")]


def _owner_and_mode(lab: Any, path: str) -> str:
    return sh(lab, NODE, "stat", "-c", "%U:%G %a", path).strip()


def test_the_data_directory_with_a_wrong_mode_heals_without_a_person_on_an_executor_host(lab: Any, faults: Faults, tmp_path: Path) -> None:
    faults.inject(NODE, "postgres-data-dir-mode")
    before = len(journal(lab))
    run = run_playbook("playbooks/heal.yml", "--limit", NODE, "-e", "autoheal_target_services=postgresql", state_dir=tmp_path / "state")
    said = one_line(run.output)
    assert run.rc == 0 and "postgresql healed in 1 attempt with: install -d -m 0700 -o postgres -g postgres" in said, run.output
    assert f"{NODE}: " in said and "the executor judged every step and read" in said, said
    assert _owner_and_mode(lab, DATA) == "postgres:postgres 700"
    [episode] = [episode for episode in episodes(tmp_path / "state") if episode["service"] == "postgresql"]
    [repair] = [verdict for verdict in episode["verdicts"] if verdict["argv"][0] == "install"]
    assert (repair["decision"], repair["rule"]) == ("allow", "create-runtime-directory"), repair
    # the executor judged it again and did it itself: its journal names the repair, once
    repaired = [entry for entry in journal(lab)[before:] if entry.get("step") == REPAIR]
    assert [(entry["decision"], entry["rule"], entry["rc"]) for entry in repaired] == [("allow", "create-runtime-directory", 0)], repaired


def test_a_link_postgres_swaps_in_for_the_data_directory_after_the_check_is_refused_by_the_executors_repair(lab: Any, faults: Faults) -> None:
    """The controller's check saw main a directory; then postgres, which owns /var/lib/postgresql/15, puts a link to
    root's directory in its place, and the healing account sends the repair the check called for. The executor's judge
    allows it (it does the repair itself); its repair meets the link and refuses it: nothing outside changes, the
    directory set aside keeps its mode, and the plan stops there."""
    faults.inject(NODE, "postgres-data-dir-mode")
    version = load_policy().version
    checked = failing_now(lab, "postgresql", NODE, version)
    assert checked["failure_class"], checked
    sh(lab, NODE, "install", "-d", "-m", "0755", "-o", "root", "-g", "root", OUTSIDE)
    swap = f"mv {DATA} {DATA}.aside && ln -s {OUTSIDE} {DATA}"
    assert lab.run_in(NODE, ["runuser", "-u", "postgres", "--", "sh", "-c", swap], timeout=30).returncode == 0
    try:
        before = len(journal(lab))
        rc, response = ask(lab, {"host": NODE, "service": "postgresql", "policy_version": version, "plan": PLAN, "step": 0,
                                 "kind": "step", "run": f"lab-{uuid.uuid4().hex}", **checked}, NODE)
        assert (rc, response["refused"], response["decision"], response["rule"]) == (1, False, "allow", "create-runtime-directory"), response
        assert response["stderr"] == f"{DATA!r} is a symbolic link: refused to follow it", response
        assert "ran_with_it" not in response, response
        assert _owner_and_mode(lab, OUTSIDE) == "root:root 755"
        assert _owner_and_mode(lab, f"{DATA}.aside") == "postgres:postgres 755"
        assert sh(lab, NODE, "readlink", DATA).strip() == OUTSIDE
        assert sh(lab, NODE, "systemctl", "is-active", "postgresql@15-main").strip() != "active"
        logged = [entry for entry in journal(lab)[before:] if entry.get("service") == "postgresql"]
        assert [(entry["step"], entry["rc"]) for entry in logged] == [(REPAIR, 1)], logged
    finally:
        lab.run_in(NODE, ["sh", "-c", f"rm -f {DATA} && mv {DATA}.aside {DATA} && rmdir {OUTSIDE}"], timeout=30)
