# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
name: timeline
type: aggregate
short_description: The timeline of every incident sentinel.heal handled, the run's HTML report and a live audit trail
version_added: 0.1.0
description:
  - Collects the results of M(sentinel.heal.heal) and M(sentinel.heal.execute) and, when the playbook
    ends, prints for each host and service the end state, the path the incident took through the heal
    loop and every step of it with its time.
  - With C(-v), each incident's last plan follows its line, every step with the guard's decision and rule.
  - When O(report_dir) is set, also writes the run's report there, one self-contained HTML page (inline CSS and SVG, no
    script, nothing from the network; every value is escaped, since the page carries host output, already redacted by
    sentinel.heal) - the fleet by outcome, what needs a person on top, then per incident the failure and its evidence,
    the diagnosis and its sources, each plan with every step's argv, the policy's rule and decision and who approved it,
    each step that ran with its rc, duration and output, the verification and links to the ansible-runner run
    directories; an incident that needs a person says the cause in the service's own words and what to do next.
  - When O(audit_file) is set, appends the audit records of every attempt as it ends (JSON Lines, the records of
    M(sentinel.heal.memory_export) C(format=audit), documented in
    R(the reports guide,ansible_collections.sentinel.heal.docsite.reports) (C(docs/docsite/rst/reports.rst))) for a log shipper to tail,
    and a C(notification) record for each message M(sentinel.heal.heal), M(sentinel.heal.execute) and
    M(sentinel.heal.approval) sent their C(notify) destinations.
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
  audit_file:
    description: File the audit records are appended to as each host's incidents end; none is written when it is not set.
    type: path
    env:
      - name: SENTINEL_HEAL_AUDIT_FILE
    ini:
      - section: sentinel_heal
        key: audit_file
"""

import time
from pathlib import Path
from typing import Any

from ansible.plugins.callback import CallbackBase

from ansible_collections.sentinel.heal.plugins.plugin_utils.report.audit import append_audit, append_records, notification_records
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.run import run_report_html
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.timeline import plans_text, timeline_text

HEAL_ACTIONS = frozenset({"sentinel.heal.heal", "sentinel.heal.execute"})
# what tells people besides: a person's denial of a plan (its notifications, and no incident of its own)
NOTIFYING_ACTIONS = HEAL_ACTIONS | {"sentinel.heal.approval"}


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
        if task.resolved_action not in NOTIFYING_ACTIONS:
            return
        host = (getattr(result, "host", None) or result._host).get_name()
        data = getattr(result, "result", None) or result._result
        incidents = list(data.get("incidents") or [])
        if task.resolved_action in HEAL_ACTIONS:
            collected = self._hosts.setdefault(host, {"incidents": [], "timeline": [], "interrupted": []})
            collected["interrupted"] += list(data.get("interrupted") or [])
            collected["incidents"] += incidents
            collected["timeline"] += list(data.get("timeline") or [])
        audit_file = self.get_option("audit_file")
        if audit_file:
            try:
                append_audit([episode for incident in incidents for episode in incident.get("attempt_log") or []], Path(audit_file).expanduser())
                if data.get("notifications"):
                    append_records(notification_records(host, data["notifications"], time.time()), Path(audit_file).expanduser())
            except OSError as exc:  # the play goes on; the memory keeps the episodes (sentinel.heal.memory_export format=audit)
                self._display.warning(f"sentinel.heal.timeline: audit_file {audit_file}: the records of {host} were not appended ({exc})")

    def v2_playbook_on_stats(self, stats: Any) -> None:
        if not any(result["incidents"] or result["interrupted"] for result in self._hosts.values()):
            return
        self._display.banner("SENTINEL.HEAL TIMELINE")
        self._display.display(timeline_text(self._hosts))
        if self._display.verbosity >= 1:
            self._display.display(plans_text(self._hosts))
        report_dir = self.get_option("report_dir")
        if report_dir:
            path = Path(report_dir).expanduser()
            path.mkdir(parents=True, exist_ok=True)
            report = path / time.strftime("sentinel-heal-%Y%m%dT%H%M%S.html")
            report.write_text(run_report_html(self._hosts, title=f"sentinel.heal run {time.strftime('%Y-%m-%d %H:%M:%S')}"), encoding="utf-8")
            self._display.display(f"report: {report}")
