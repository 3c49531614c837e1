"""The run report: real heal outcomes (the planner, policy, runbooks and memory; a scripted executor) rendered as the page a
person reads: the fleet with what needs a human on top, the cause in the service's own words, what to do next."""

from __future__ import annotations

import dataclasses
import re
from html.parser import HTMLParser
from pathlib import Path
from typing import Any

from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import FleetIncident
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import puts_back_said, restores_of
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.results import host_result
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import DependencyOutcome
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.run import OUTPUT_CAP, capped, own_words, run_report_html
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.timeline import plans_text
from helpers import CONFIG_OK, HEALTHY, STILL_DOWN, ScriptedExecutor, _tools, nginx_failure

SAID = 'nginx: [emerg] unknown directive "server_nmae" in /etc/nginx/sites-enabled/default:24'
STRICT = "version: 1\nrules:\n  - {id: t, executable: nginx, argv: ['-t'], decision: allow, become: true}\n"


class _Page(HTMLParser):
    """What a browser would load besides the page itself, and the text and attributes it shows."""

    def __init__(self) -> None:
        super().__init__()
        self.tags: list[tuple[str, dict[str, str | None]]] = []
        self.text: list[str] = []

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.append((tag, dict(attrs)))

    def handle_data(self, data: str) -> None:
        self.text.append(data)


def _fleet(tmp_path: Path) -> dict[str, dict[str, Any]]:
    healed = heal_incident(nginx_failure(host="web1"), _tools(tmp_path / "a", ScriptedExecutor(CONFIG_OK), [HEALTHY]))
    escalated = heal_incident(nginx_failure("not_running", host="web2"), _tools(tmp_path / "b", ScriptedExecutor({"nginx -t": SAID}), []))
    strict = tmp_path / "strict.yml"
    strict.write_text(STRICT)
    waiting = heal_incident(nginx_failure(host="web3"), _tools(tmp_path / "c", ScriptedExecutor(CONFIG_OK), [], policy=load_policy(strict)))
    return {host: host_result(host, [outcome], check_mode=False) for host, outcome in (("web1", healed), ("web2", escalated), ("web3", waiting))}


def test_the_fleet_comes_first_with_what_needs_a_person_on_top(tmp_path: Path) -> None:
    for directory in "abc":
        (tmp_path / directory).mkdir()
    hosts = _fleet(tmp_path)
    page = run_report_html(hosts, title="night of 26 Nov")
    parsed = _Page()
    parsed.feed(page)
    fleet_rows = [attrs["data-host"] for tag, attrs in parsed.tags if tag == "tr" and attrs.get("data-host")]
    assert fleet_rows == ["web2", "web3", "web1"]  # escalated, awaiting approval, healed
    sections = [(attrs["data-host"], attrs["class"]) for tag, attrs in parsed.tags if tag == "section"]
    assert sections == [("web2", "incident escalated"), ("web3", "incident awaiting_approval"), ("web1", "incident healed")]
    assert "3 host(s): 1 escalated, 1 awaiting approval, 1 healed" in page
    # the escalation in nginx's own words, and what a person does next
    assert f"<li class='own-words'>{SAID.replace(chr(34), '&quot;')}</li>" in page
    assert "next: Fix the cause above on web2 by hand" in page
    plan_id = hosts["web3"]["plan_id"]
    assert f"ansible-playbook sentinel.heal.approve -e plan_id={plan_id}" in page
    # every step's argv with the guard's rule and decision, what ran, and where ansible-runner kept it
    assert "<code class='argv'>rm -f /run/nginx.pid</code></td><td>allow</td><td>remove-stale-pidfile" in page
    assert "<code class='argv'>rm -f /run/nginx.pid</code></td><td>approve</td><td>default-approve" in page
    assert re.search(r"<td><code>service nginx start</code></td><td>ok</td><td>rc=0</td><td>0\.0 s</td>", page)
    assert ("a", {"class": "artifacts", "href": "file:///dev/null"}) in parsed.tags
    assert "sources: runbook nginx-config-error; planner: offline planner (memory and runbooks)" in page


def test_the_page_is_self_contained_and_leaves_no_template_unrendered(tmp_path: Path) -> None:
    for directory in "abc":
        (tmp_path / directory).mkdir()
    page = run_report_html(_fleet(tmp_path), title="run")
    parsed = _Page()
    parsed.feed(page)
    tags = {tag for tag, _attrs in parsed.tags}
    assert not tags & {"script", "link", "img", "iframe", "object", "embed"}
    assert not [attrs for _tag, attrs in parsed.tags if attrs.get("src")]
    assert "url(" not in page and "@import" not in page and "@font-face" not in page
    assert not re.findall(r"\{[a-z_]+\}", "".join(parsed.text))


def test_own_words_take_the_failed_steps_error_lines_first(tmp_path: Path) -> None:
    failure = nginx_failure("not_running")
    said = "Job for nginx.service failed because the control process exited with error code."
    evidence = dict(failure.evidence, logs={"/var/log/nginx/error.log": "2026/11/26 [emerg] bind() to 0.0.0.0:80 failed (98: Address in use)"})
    executor = ScriptedExecutor()
    outcome = heal_incident(dataclasses.replace(failure, evidence=evidence), _tools(tmp_path, executor, [STILL_DOWN] * 3, max_attempts=1))
    incident = {"host": "web1", **host_result("web1", [outcome], check_mode=False)["incidents"][0]}
    incident["attempt_log"][-1]["results"]["steps"][-1].update(status="failed", rc=1, stderr=said)
    words = own_words(incident)
    assert words[0] == said and "[emerg] bind() to 0.0.0.0:80 failed (98: Address in use)" in words[-1]


def test_a_long_output_keeps_its_end_and_says_what_was_cut() -> None:
    text = "x" * 10 + "y" * OUTPUT_CAP
    assert capped(text) == f"[10 characters before this cut; the run's artifacts keep them]\n{'y' * OUTPUT_CAP}"
    assert capped("short") == "short"


def test_verbose_adds_each_plan_with_the_guards_verdicts(tmp_path: Path) -> None:
    for directory in "abc":
        (tmp_path / directory).mkdir()
    text = plans_text(_fleet(tmp_path))
    assert "web1 nginx: plan from runbook" in text and "allow    rm -f /run/nginx.pid    # " in text
    assert "web2 nginx: plan from runbook" in text and "escalates: " in text


def test_a_remediation_an_earlier_job_left_interrupted_is_on_top_with_its_run(tmp_path: Path) -> None:
    (tmp_path / "a").mkdir()
    healed = heal_incident(nginx_failure(host="web1"), _tools(tmp_path / "a", ScriptedExecutor(CONFIG_OK), [HEALTHY]))
    interrupted = {"episode": 7, "host": "web9", "service": "redis", "incident_id": "i", "started": ["service redis-server start"],
                   "summary": "interrupted: its job ended during the remediation", "run_dir": "/state/runs/web9/run-7"}
    hosts = {"web1": host_result("web1", [healed], check_mode=False),
             "web9": {"incidents": [], "timeline": [], "interrupted": [interrupted]}}
    page = run_report_html(hosts, title="run")
    parsed = _Page()
    parsed.feed(page)
    assert [attrs["data-host"] for tag, attrs in parsed.tags if tag == "tr" and attrs.get("data-host")] == ["web9", "web1"]
    assert "web9 redis: interrupted" in page and "(episode 7; started: service redis-server start)" in page
    assert ("a", {"class": "artifacts", "href": "file:///state/runs/web9/run-7"}) in parsed.tags


def test_a_restore_that_waits_shows_the_diff_of_what_it_puts_back(tmp_path: Path) -> None:
    site = "/etc/nginx/sites-available/default"
    changes = {"good_at": 1.0, "packages": [], "files": [
        {"path": site, "change": "modified", "good_sha256": "c" * 64,
         "diff": f"--- {site} (last known good)\n+++ {site}\n@@ -24 +24 @@\n-\tserver_name _;\n+\tserver_nmae _;\n"}]}
    failure = nginx_failure("not_running", host="web1")
    failure = dataclasses.replace(failure, evidence={**failure.evidence, "changes": changes}, spec={**failure.spec, "restore_known_good": "approve"})
    waiting = heal_incident(failure, _tools(tmp_path, ScriptedExecutor({"nginx -t": SAID}), []))
    result = host_result("web1", [waiting], check_mode=False)
    assert result["pending_plans"][0]["puts_back"][0]["path"] == site
    page = _Page()
    page.feed(run_report_html({"web1": result}, title="run"))
    text = "".join(page.text)
    assert f"puts back the last known good {site} (sha256 {'c' * 12})" in text
    assert f"--- {site}\n+++ {site} (last known good)\n@@ -24 +24 @@\n-\tserver_nmae _;\n+\tserver_name _;\n" in text


def test_a_restore_of_a_link_a_person_replaced_by_an_edited_copy_says_it_puts_the_link_back(tmp_path: Path) -> None:
    enabled = "/etc/nginx/sites-enabled/default"
    changes = {"good_at": 1.0, "packages": [], "files": [
        {"path": enabled, "change": "modified", "good_sha256": "c" * 64, "good_link": "../sites-available/default",
         "diff": f"--- {enabled} (last known good)\n+++ {enabled}\n@@ -24 +24 @@\n-\tserver_name _;\n+\tserver_nmae _;\n"}]}
    failure = nginx_failure("not_running", host="web1")
    failure = dataclasses.replace(failure, evidence={**failure.evidence, "changes": changes}, spec={**failure.spec, "restore_known_good": "approve"})
    waiting = heal_incident(failure, _tools(tmp_path, ScriptedExecutor({"nginx -t": SAID}), []))
    result = host_result("web1", [waiting], check_mode=False)
    [restore] = result["pending_plans"][0]["puts_back"]
    assert restore["path"] == enabled and restore["link"] == "../sites-available/default"
    said = puts_back_said([restore])
    assert said == f"; puts back {enabled} as the link to ../sites-available/default it was: '-\\tserver_nmae _;' '+\\tserver_name _;'"
    page = _Page()
    page.feed(run_report_html({"web1": result}, title="run"))
    assert f"puts back the last known good {enabled} as the link to ../sites-available/default it was (sha256 {'c' * 12})" in "".join(page.text)


def test_a_service_that_answered_once_what_it_needs_was_healed_shows_the_chain(tmp_path: Path) -> None:
    storefront = dataclasses.replace(nginx_failure(host="web1"), service="storefront")
    recovered = heal_incident(storefront, _tools(tmp_path, ScriptedExecutor(CONFIG_OK), [HEALTHY]), [DependencyOutcome("upstream", "healed", "")])
    page = _Page()
    page.feed(run_report_html({"web1": host_result("web1", [recovered], check_mode=False)}, title="run"))
    text = "".join(page.text)
    assert "web1 storefront: recovered" in text and "needs upstream (healed), failing too and healed first" in text
    assert "storefront answers again since what it needs was healed first: upstream (healed); nothing ran for storefront" in text


def test_a_fleet_incident_is_shown_once_before_its_hosts_with_what_they_share_and_one_closed_is_said(tmp_path: Path) -> None:
    fleet = FleetIncident(id=7, signature="s", service="nginx", failure_class="not_running", summary="nginx is not running",
                          hosts=("web1", "web2"), first_seen=1.0, last_seen=3.0, common=("the same address http://10.0.0.9:8090",))
    hosts = {}
    for host in fleet.hosts:
        outcome = heal_incident(nginx_failure("not_running", host=host), _tools(tmp_path / host, ScriptedExecutor(), [HEALTHY]),
                                fleet_incident=fleet)
        hosts[host] = host_result(host, [outcome], check_mode=False)
    closed = dataclasses.replace(fleet, id=6, closed_at=5.0)
    hosts["web3"] = host_result("web3", [], check_mode=False, fleet_closed=[closed])
    page = run_report_html(hosts, title="run")
    parsed = _Page()
    parsed.feed(page)
    assert [attrs["data-fleet-incident"] for tag, attrs in parsed.tags if tag == "section" and "data-fleet-incident" in attrs] == ["7"]
    assert "fleet incident 7: nginx fails the same way on 2 hosts" in page and "<li>the same address http://10.0.0.9:8090</li>" in page
    assert page.index("data-fleet-incident='7'") < page.index("<div id='web1'>")
    assert "fleet incident 6 (nginx on 2 hosts) closed: each of its hosts was seen without its failure" in page


def test_a_changed_line_that_begins_like_a_diff_header_is_said_and_put_back_as_a_changed_line() -> None:
    """memcached's configuration is options: an added ``--max-conections 1024`` reads ``+--max-conections 1024`` and,
    put back, ``---max-conections 1024``; only the lines before the first @@ are headers."""
    conf = "/etc/memcached.conf"
    diff = f"--- {conf} (last known good)\n+++ {conf}\n@@ -9,0 +10 @@\n+--max-conections 1024\n"
    evidence = {"changes": {"files": [{"path": conf, "change": "modified", "good_sha256": "c" * 64, "diff": diff}]}}
    [restore] = restores_of([["sentinel-heal-restore", conf, "c" * 64]], evidence)
    assert restore["diff"] == f"--- {conf}\n+++ {conf} (last known good)\n@@ -10 +9,0 @@\n---max-conections 1024\n"
    assert puts_back_said([restore]) == f"; puts back {conf}: '---max-conections 1024'"
