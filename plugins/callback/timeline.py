# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: timeline
type: aggregate
short_description: The timeline of every incident sentinel.heal handled, at the end of the run and as HTML
version_added: 0.1.0
description:
  - Collects the results of M(sentinel.heal.heal) and M(sentinel.heal.execute) and, when the playbook
    ends, prints for each host and service the end state, the path the incident took through the heal
    loop and every step of it with its time.
  - When O(report_dir) is set, also writes the same as a self-contained HTML page there (every value is
    escaped, since the page carries host output, already redacted by sentinel.heal).
  - Enable it with C(callbacks_enabled = sentinel.heal.timeline) in C(ansible.cfg) or
    C(ANSIBLE_CALLBACKS_ENABLED=sentinel.heal.timeline).
author:
  - Sentinel Heal Maintainers (@sentinel-heal)
options:
  report_dir:
    description: Directory for the HTML report (one file per run); none is written when it is not set.
    type: path
    env:
      - name: SENTINEL_HEAL_REPORT_DIR
    ini:
      - section: sentinel_heal
        key: report_dir
"""

import time
from pathlib import Path
from typing import Any

from ansible.plugins.callback import CallbackBase

from ansible_collections.sentinel.heal.plugins.plugin_utils.report.timeline import timeline_html, timeline_text

HEAL_ACTIONS = frozenset({"sentinel.heal.heal", "sentinel.heal.execute"})


class CallbackModule(CallbackBase):
    CALLBACK_VERSION = 2.0
    CALLBACK_TYPE = "aggregate"
    CALLBACK_NAME = "sentinel.heal.timeline"
    CALLBACK_NEEDS_ENABLED = True

    def __init__(self) -> None:
        super().__init__()
        self._hosts: dict[str, dict[str, Any]] = {}

    def v2_runner_on_ok(self, result: Any) -> None:
        task = getattr(result, "task", None) or result._task
        if task.resolved_action not in HEAL_ACTIONS:
            return
        host = (getattr(result, "host", None) or result._host).get_name()
        data = getattr(result, "result", None) or result._result
        collected = self._hosts.setdefault(host, {"incidents": [], "timeline": []})
        collected["incidents"] += list(data.get("incidents") or [])
        collected["timeline"] += list(data.get("timeline") or [])

    def v2_playbook_on_stats(self, stats: Any) -> None:
        if not any(result["incidents"] for result in self._hosts.values()):
            return
        self._display.banner("SENTINEL.HEAL TIMELINE")
        self._display.display(timeline_text(self._hosts))
        report_dir = self.get_option("report_dir")
        if report_dir:
            path = Path(report_dir).expanduser()
            path.mkdir(parents=True, exist_ok=True)
            report = path / time.strftime("sentinel-heal-%Y%m%dT%H%M%S.html")
            report.write_text(timeline_html(self._hosts, title=f"sentinel.heal {time.strftime('%Y-%m-%d %H:%M:%S')}"), encoding="utf-8")
            self._display.display(f"report: {report}")
