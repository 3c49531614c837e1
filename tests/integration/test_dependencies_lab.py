"""Dependencies first, on the lab: a storefront (nginx proxying :8081 to an upstream on the same host) fails because
its declared upstream is down. A job about the storefront alone (as an alert makes one) checks what it needs too, heals
the upstream first, then finds the storefront answering: nothing runs for nginx, and the run says why."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml
from conftest import ROOT, Faults, RollOut, acted, episodes, one_line, run_playbook, sh

HEAL = "playbooks/heal.yml"
UPSTREAM = {"name": "upstream", "service": "lab-upstream", "ports": [8080]}
# the check systemd cannot make: nginx runs, the page it proxies does not answer
STOREFRONT = {"name": "storefront", "service": "nginx", "http": {"url": "http://127.0.0.1:8081/", "body": "lab upstream"},
              "depends_on": ["upstream"]}


def test_a_storefront_whose_upstream_is_down_is_healed_by_healing_the_upstream_first(
        lab: Any, faults: Faults, roll_out: RollOut, tmp_path: Path) -> None:
    lab_services = yaml.safe_load((ROOT / "inventories" / "lab" / "group_vars" / "lab.yml").read_text())["autoheal_services"]
    declared = tmp_path / "services.yml"
    declared.write_text(yaml.safe_dump({"autoheal_services": [*lab_services, STOREFRONT, UPSTREAM]}))
    roll_out("-e", f"@{declared}", hosts="node1")
    faults.inject("node1", "nginx-upstream-down")
    nginx_pid = sh(lab, "node1", "cat", "/run/nginx.pid").strip()

    run = run_playbook(HEAL, "--limit", "node1", "-e", f"@{declared}", "-e", '{"autoheal_target_services": ["storefront"]}',
                       state_dir=tmp_path)
    said = one_line(run.output)
    assert run.rc == 0, run.output
    assert "node1: upstream healed in 1 attempt with:" in said, run.output
    assert ("node1: storefront recovered: storefront answers again since what it needs was healed first: upstream (healed); "
            "nothing ran for storefront") in said, run.output
    assert sh(lab, "node1", "curl", "-fs", "http://127.0.0.1:8081/").strip() == "lab upstream"
    # one episode, the upstream's; nginx was not touched
    assert [(episode["service"], episode["outcome"]) for episode in episodes(tmp_path)] == [("upstream", "healed")]
    steps = [argv for _purpose, argv in acted(tmp_path, "node1")]
    assert steps and not [argv for argv in steps if "nginx" in " ".join(argv)], steps
    assert sh(lab, "node1", "cat", "/run/nginx.pid").strip() == nginx_pid
