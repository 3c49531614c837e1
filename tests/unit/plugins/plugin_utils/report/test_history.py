"""The history report of a past window, from the memory on both backends: the charts people look at, the incidents that
still need a person in full, and nothing from outside the page."""

from __future__ import annotations

import html
import re
from html.parser import HTMLParser
from pathlib import Path

from memory_places import MemoryPlace
from test_audit import T0, record_fixed_incidents

from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.flow import heal_incident
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.history import history_html, incidents_of
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.svg import columns, hbars
from helpers import CONFIG_OK, HEALTHY, ScriptedExecutor, _tools, nginx_failure


class _Svgs(HTMLParser):
    def __init__(self) -> None:
        super().__init__()
        self.titles: list[str] = []
        self.in_svg = 0
        self.in_title = False
        self.tags: set[str] = set()

    def handle_starttag(self, tag: str, attrs: list[tuple[str, str | None]]) -> None:
        self.tags.add(tag)
        self.in_svg += tag == "svg"
        self.in_title = tag == "title" and self.in_svg > 0

    def handle_endtag(self, tag: str) -> None:
        self.in_svg -= tag == "svg"
        self.in_title = False

    def handle_data(self, data: str) -> None:
        if self.in_title:
            self.titles.append(data)


def test_the_history_of_a_window_charts_it_and_details_what_needs_a_person(memory_place: MemoryPlace) -> None:
    with memory_place.open() as memory:
        record_fixed_incidents(memory)
        episodes = memory.episodes_between(T0 - 2 * 86400, T0 + 3600)
    page = history_html(episodes, since=T0 - 2 * 86400, until=T0 + 3600, title="last 2 days")
    assert "3 incident(s), 4 attempt(s): 1 escalated, 1 awaiting approval, 1 healed" in page
    svgs = _Svgs()
    svgs.feed(page)
    assert "nginx: 3 incident(s), 33% healed and held (line: that rate per day)" in svgs.titles
    assert {"incidents healed within", "incidents per failure fingerprint", "attempts whose plan ran and did not heal"} <= set(svgs.titles)
    assert "nginx: service nginx start" in page  # the plan that failed
    assert "1 healed: median 14.0 s, 90th percentile 14.0 s" in page  # from the first attempt's start to the verified heal
    # in full: what a person has to do, in the service's own words
    assert 'nginx: [emerg] unknown directive &quot;server_nmae&quot; in /etc/nginx/sites-enabled/default:24' in page
    plan_id = next(e["plan_id"] for e in episodes if e["outcome"] == "awaiting_approval")
    assert f"sentinel.heal.approve -e plan_id={plan_id}" in page
    assert not svgs.tags & {"script", "link", "img", "iframe"} and not re.findall(r"\{[a-z_]+\}", page)


def test_a_heal_that_relapsed_is_marked_in_the_chart_and_the_table_and_is_no_heal_that_held(tmp_path: Path) -> None:
    now = [1_800_000_000.0]
    tools = _tools(tmp_path, ScriptedExecutor(CONFIG_OK), [HEALTHY, HEALTHY], clock=lambda: now[0])
    assert heal_incident(nginx_failure(pid=10), tools).state.status == "healed"
    now[0] += 150
    assert heal_incident(nginx_failure(pid=20), tools).to_dict()["relapsed_from"] == 1
    assert tools.memory is not None
    episodes = tools.memory.episodes_between(0, now[0] + 60)
    page = history_html(episodes, since=now[0] - 86400, until=now[0] + 60, title="today")
    svgs = _Svgs()
    svgs.feed(page)
    assert "nginx: 2 incident(s), 50% healed and held, 1 healed and relapsed (red) (line: that rate per day)" in svgs.titles
    assert any(title.endswith(": 1 relapsed") for title in svgs.titles)
    assert page.count("relapsed after 2 min") == 1  # the first heal (its episode ended a few seconds before the relapse)


def test_an_incident_is_what_its_last_episode_became() -> None:
    base = {"host": "web1", "service": "nginx", "fingerprint": "f", "failure_class": "c", "error_text": "e"}
    episodes = [{**base, "incident_id": "a", "attempt": 1, "outcome": "failed", "started_at": 1.0, "finished_at": 2.0},
                {**base, "incident_id": "a", "attempt": 2, "outcome": "failed", "started_at": 3.0, "finished_at": 4.0},
                {**base, "incident_id": "b", "attempt": 1, "outcome": "healed", "started_at": 5.0, "finished_at": 9.0}]
    assert [(incident.status, incident.took) for incident in incidents_of(episodes)] == [("escalated", 3.0), ("healed", 4.0)]


def test_the_svg_writer_escapes_labels_and_scales_to_the_largest_value() -> None:
    chart = hbars([("<b>nginx</b>", 4), ("redis", 2)], title="top")
    assert "&lt;b&gt;nginx&lt;/b&gt;" in chart and "<b>" not in chart
    widths = [int(width) for width in re.findall(r"<rect x='\d+' y='\d+' width='(\d+)'", chart)]
    assert widths[0] == 2 * widths[1]
    days = columns(["2026-11-25", "2026-11-26"], [2, 0], title="per day", rates=[0.5, None])
    assert days.count("<rect") == 2 and "<polyline points='" in days
    assert hbars([], title="nothing") == "<p class='muted'>nothing: nothing in this window</p>"


def test_a_service_the_flapping_limit_refused_is_escalated_in_the_history_and_its_next_names_the_limit_and_the_reset(
        tmp_path: Path) -> None:
    tools = _tools(tmp_path, ScriptedExecutor(CONFIG_OK), [HEALTHY], flap_limit=1)
    assert heal_incident(nginx_failure(), tools).state.status == "healed"
    assert heal_incident(nginx_failure(), tools).state.status == "escalated"  # refused: flapping
    assert tools.memory is not None
    episodes = tools.memory.episodes_between(0, 2e9)
    page = html.unescape(history_html(episodes, since=0, until=2e9, title="today"))
    assert "2 incident(s), 2 attempt(s): 1 escalated, 1 healed" in page
    assert re.search(r"next: Nothing ran on web1: the flapping limit holds nginx until \S+, in (59 min \d+ s|1 h) \(the first run after "
                     r"that takes it up\)\. To lift it now: sentinel\.heal\.flapping_reset host=web1 service=nginx decided_by=YOU", page), page
    assert "flapping: remediated 1 times in the last 60 min" in page and "by hand" not in page
