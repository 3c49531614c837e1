"""The reports on the lab fleet, following the guide reports.rst (docs/docsite/rst/) as written: a run with a healed host (nginx killed on node1), an
escalated one (a typo in nginx's configuration on node3) and one whose plan waits for a person (redis's log filesystem
full on node2); its run report opened in headless Chromium and read through the DOM; the audit trail, appended live
by the callback and exported from the memory, checked against docs/audit-schema.json; a secret given to the run
(autoheal_redact_values) in none of them."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import uuid
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

import jsonschema
import pytest
from conftest import ROOT, Faults, sh
from guides import code_block

NGINX_SAID = 'unknown directive "server_nmae"'


class Dom(HTMLParser):
    """The DOM Chromium dumped: each element's tag, attributes and the text inside it."""

    def __init__(self) -> None:
        super().__init__()
        self.elements: list[dict[str, Any]] = []
        self._open: list[dict[str, Any]] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        element = {"tag": tag, **{name: value or "" for name, value in attrs}, "text": ""}
        self.elements.append(element)
        if tag not in ("meta", "br", "line", "rect", "polyline"):
            self._open.append(element)

    def handle_endtag(self, tag: str) -> None:
        while self._open:
            if self._open.pop()["tag"] == tag:
                break

    def handle_data(self, data: str) -> None:
        for element in self._open:
            element["text"] += data

    def find(self, tag: str, **attrs: str) -> list[dict[str, Any]]:
        return [element for element in self.elements if element["tag"] == tag
                and all(name in element and value in element[name].split() for name, value in attrs.items())]


def _shell(body: str, env: dict[str, str], cwd: Path, rc: int = 0) -> str:
    proc = subprocess.run(["bash", "-euo", "pipefail", "-c", body], env=env, cwd=cwd, capture_output=True, text=True, timeout=300, check=False)
    assert proc.returncode == rc, f"{body}\nrc={proc.returncode}\n{proc.stdout}{proc.stderr}"
    return proc.stdout + proc.stderr


def _chromium(*args: str) -> str:
    if shutil.which("chromium") is None:
        pytest.fail("Debian's chromium is missing: apt-get install -y chromium (make system-packages installs it)")
    proc = subprocess.run(["chromium", "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run", "--disable-extensions",
                           "--disable-background-networking", *args], capture_output=True, text=True, timeout=120, check=False)
    assert proc.returncode == 0, proc.stderr
    return proc.stdout


def test_the_reports_page_runs_as_written_and_its_report_opens_in_chromium(lab: Any, faults: Faults, tmp_path: Path) -> None:
    secret = f"hunter2-{uuid.uuid4().hex[:12]}"
    faults.inject("node1", "nginx-killed")
    faults.inject("node3", "nginx-config-error")
    faults.inject("node2", "redis-log-disk-full")
    # the secret where the run reads it: an error line of the log service_check tails for the escalated incident
    sh(lab, "node3", "sh", "-c", f"echo '2026/11/26 03:12:44 [error] 811#811: upstream login {secret} refused' >> /var/log/nginx/error.log")

    home = tmp_path / "home"
    inventory = home / "ops" / "inventory"
    lab.copy_inventory(inventory)
    (inventory / "group_vars" / "all.yml").write_text(f"autoheal_redact_values: [{secret}]\n")
    env = {key: value for key, value in os.environ.items() if not key.startswith("ANSIBLE_")}
    env.update(HOME=str(home), PATH=f"{Path(sys.executable).parent}{os.pathsep}{env['PATH']}", ANSIBLE_NOCOLOR="1",
               ANSIBLE_COLLECTIONS_PATH=str(ROOT / ".collections"), ANSIBLE_HOST_KEY_CHECKING="False")

    run, history, export = (code_block("reports", name).body for name in ("run", "history", "export"))
    said = " ".join(_shell(run, env, home, rc=2).split())  # an escalation fails its host, as the guide says
    assert "node1 nginx: healed after 1 attempt(s)" in said and "node3 nginx: escalated" in said, said
    assert "node2 redis: awaiting_approval" in said, said
    reports = home / "reports"
    [report] = reports.glob("sentinel-heal-*.html")
    assert f"report: {report}" in said

    # Chromium, offline: the DOM it built, and a screenshot kept with the test's files
    dom = Dom()
    dom.feed(_chromium("--dump-dom", report.as_uri()))
    screenshot = tmp_path / "run-report.png"
    _chromium(f"--screenshot={screenshot}", "--window-size=1280,3000", report.as_uri())
    assert screenshot.stat().st_size > 10_000
    fleet = {row["data-host"]: row["class"] for row in dom.find("tr") if row.get("data-host")}
    assert fleet == {"node3": "escalated", "node2": "awaiting_approval", "node1": "healed"}
    assert list(fleet) == ["node3", "node2", "node1"]  # what needs a person on top
    escalated = next(section for section in dom.find("section", **{"class": "incident"}) if section["data-host"] == "node3")
    words = [li["text"] for li in dom.find("li", **{"class": "own-words"}) if li["text"] in escalated["text"]]
    assert any(NGINX_SAID in line and "nginx" in line for line in words), words
    assert "next: Fix the cause above on node3 by hand" in escalated["text"]
    waiting = next(section for section in dom.find("section", **{"class": "incident"}) if section["data-host"] == "node2")
    assert re.search(r"ansible-playbook sentinel\.heal\.approve -e plan_id=[0-9a-f]{32}", waiting["text"]), waiting["text"]
    runs = home / ".local" / "state" / "sentinel-heal" / "runs"
    links = [a["href"] for a in dom.find("a", **{"class": "artifacts"})]
    assert links and all(link.startswith(f"file://{runs}/") and Path(link.removeprefix("file://")).is_dir() for link in links), links
    # only node1 ran through ansible-runner (its evidence, a request to its executor, and its remediation); node3 (sysv)
    # read its evidence in the check itself, and node2's redis plan waits with nothing read or run
    assert {Path(link.removeprefix("file://")).parent.name for link in links} == {"node1"}
    assert "no ansible-runner run" in escalated["text"] and "no ansible-runner run" in waiting["text"]
    html = report.read_text()
    assert "upstream login ******** refused" in html  # the line made it, the secret did not
    assert secret not in html and secret not in " ".join(e["text"] for e in dom.elements)

    # the history and the audit trail of the same run, as the guide runs them
    _shell(history, env, home)
    _shell(export, env, home)
    page = (reports / "history.html").read_text()
    assert "3 incident(s), 3 attempt(s): 1 escalated, 1 awaiting approval, 1 healed" in page and secret not in page
    schema = json.loads((ROOT / "docs" / "audit-schema.json").read_text())
    trails = {name: [json.loads(line) for line in (reports / name).read_text().splitlines()]
              for name in ("audit.jsonl", "audit-7d.jsonl", "audit-1d.jsonl")}
    for records in trails.values():
        for record in records:
            jsonschema.validate(record, schema)
        assert secret not in json.dumps(records)
    # the live records are those the memory exports, episode ids and run directories included (live, in the order the
    # hosts ended; exported, in the order the episodes started)
    same = [sorted(json.dumps(record, sort_keys=True) for record in records) for records in trails.values()]
    assert same[0] == same[1] == same[2] and len(same[0]) > 10
    outcomes = {(record["host"], record["detail"]["outcome"]) for record in trails["audit.jsonl"] if record["kind"] == "outcome"}
    assert outcomes == {("node1", "healed"), ("node3", "escalated"), ("node2", "awaiting_approval")}
    assert all(record["episode_id"] for record in trails["audit.jsonl"])
