"""The guide eda.rst (docs/docsite/rst/), run as written on the lab fleet: a person's home with the collection installed
from its tarball (as command_line.rst installs it), ansible-rulebook and Java installed as the guide says, the watchdog
and the alert rulebook started as the guide starts them (in the background, stopped with Ctrl-C), the guide's alerts
posted with its curl commands.

The virtualenv of the guide is this checkout's (linked as ~/.venvs/sentinel-heal): command_line.rst's test makes
one from nothing already.
"""

from __future__ import annotations

import os
import re
import subprocess
import time
from pathlib import Path
from typing import Any

import yaml
from conftest import ROOT, Faults, episodes
from guides import CodeBlock, code_block
from rulebook import Rulebook, answers
from test_user_path_lab import CARRIED, Reader, lab_inventory

NGINX = "http://10.77.0.11/"


def in_background(reader: Reader, block: CodeBlock, log: Path, ready: str) -> Rulebook:
    """A block that runs until Ctrl-C (a rulebook in the foreground), started as a person's shell would."""
    return Rulebook(["bash", "-euo", "pipefail", "-c", CARRIED + block.body], reader.env, log, ready, cwd=reader.home)


def wait_until_answers(url: str, timeout: float) -> None:
    deadline = time.monotonic() + timeout
    while not answers(url):
        assert time.monotonic() < deadline, f"{url} did not answer within {timeout:g} s"
        time.sleep(0.2)


def test_the_page_heals_on_events_as_written(tmp_path: Path, lab: Any, faults: Faults) -> None:
    reader = Reader(tmp_path / "home")
    (reader.home / ".venvs").mkdir()
    (reader.home / ".venvs" / "sentinel-heal").symlink_to(ROOT / ".venv")
    # the guide's blocks up to the AWX activation; those after them show other monitors' mappings (checked by the unit
    # tests and test_eda_mapping.py), and the watchdog's mapping example needs a service the lab does not declare:
    # test_eda_lab runs it
    install, watchdog, alerts, curl, alertmanager, prometheus, activation = (
        code_block("eda", name) for name in ("install", "watchdog", "alerts", "curl", "alertmanager", "prometheus", "activation"))
    # the collection, as command_line.rst builds and installs it (from this checkout)
    reader.follow(CodeBlock("bash", f"ansible-galaxy collection build {ROOT} --output-path ~/src/dist --force\n"
                                    "ansible-galaxy collection install ~/src/dist/sentinel-heal-*.tar.gz -p ~/.ansible/collections --force\n"))
    reader.follow(code_block("command_line", "ansible_cfg"))   # ~/ops/ansible.cfg
    lab_inventory(reader.home / "ops")

    installed = reader.follow(install)
    assert re.search(r"Java version = (1[7-9]|[2-9]\d)", installed), installed

    with in_background(reader, watchdog, tmp_path / "watchdog.log", ready="watching") as watching:
        time.sleep(3)
        faults.inject("node1", "nginx-killed")
        wait_until_answers(NGINX, timeout=60)
        watching.wait_for(r"^PLAY RECAP", timeout=60)
        assert watching.heals() == 1, watching.output()
        assert watching.stop() is not None, watching.output()[-3000:]  # stopped by Ctrl-C, not killed
    assert "Traceback" not in watching.output()
    assert watching.leftovers() == []

    with in_background(reader, alerts, tmp_path / "alerts.log", ready="listening on 127.0.0.1:5000") as listening:
        faults.inject("node1", "nginx-killed")
        posted = reader.follow(curl)
        assert posted.count('"accepted": [{"host": "node1", "service": "nginx"}]') == 2, posted
        wait_until_answers(NGINX, timeout=60)
        listening.wait_for(r"^PLAY RECAP", timeout=60)
        time.sleep(2)
        assert listening.heals() == 1, listening.output()
    state = reader.home / ".local" / "state" / "sentinel-heal"
    assert [(episode["host"], episode["service"], episode["outcome"]) for episode in episodes(state)] == [("node1", "nginx", "healed")] * 2

    # the files the guide shows: Alertmanager's receiver points at the rulebook's port; the AWX rulebook is one
    receiver = yaml.safe_load(alertmanager.body)["receivers"][0]["webhook_configs"][0]
    assert receiver["url"].endswith(":5000/alerts")
    assert yaml.safe_load(prometheus.body)["groups"][0]["rules"][0]["labels"]["service"] == "nginx"
    ruleset = yaml.safe_load(activation.body)[0]
    assert ruleset["rules"][0]["action"]["run_job_template"]["job_args"]["limit"] == "{{ event.sentinel.host }}"
    rulebook_file = tmp_path / "activation.yml"
    rulebook_file.write_text(activation.body)
    checked = subprocess.run(["ansible-lint", "--offline", str(rulebook_file)], cwd=tmp_path, capture_output=True, text=True, check=False,
                             env=dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg")))
    assert checked.returncode == 0, checked.stdout + checked.stderr
