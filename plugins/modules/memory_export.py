#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# This module is implemented as the action plugin plugins/action/memory_export.py; this file holds its documentation.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: memory_export
short_description: Export sentinel.heal's memory - the episodes as JSON, the audit trail as JSON Lines, the history as HTML
version_added: 0.2.0
description:
  - Reads the memory on the controller, whatever host the task runs for - the SQLite file in O(state_dir), or the
    PostgreSQL database of O(memory_url) - and writes to O(dest) on the controller, whole or not at all (a temporary
    file renamed over it).
  - O(format=episodes) - the latest episodes (filtered by O(host), O(service), O(outcome) and O(fingerprint), at most
    O(limit)) as one JSON document with their evidence, plans, verdicts and results; without O(dest) it returns them.
  - O(format=audit) - the audit trail of the episodes that started in the last O(days) (all of them without it) as JSON
    Lines, one record per decision and action (incident opened, evidence, plan, verdict, approval, step executed,
    verification, outcome) with the episode id, the plan hash, the policy version, the approver, the ansible-runner run
    directories and UTC ISO 8601 times, then what the approval page (the C(sentinel.heal.approval_page) event source)
    was asked in the window - each decision it took and each request it refused, C(approval_request) records -, whose
    fields R(the reports guide,ansible_collections.sentinel.heal.docsite.reports) (C(docs/docsite/rst/reports.rst))
    documents; without O(dest) it returns them.
  - O(format=history) - one self-contained HTML page (inline CSS and SVG charts, no script) of what happened in the last
    O(days) (7 by default) - incidents and heal rate per service per day, time to heal, the failures seen most, the
    plans that failed most, and in full every incident that still needs a person, with the cause in the service's own
    words and what to do next. Also C(sentinel.heal.report).
  - The filters and O(limit) apply to O(format=episodes), O(days) to O(format=audit) and O(format=history); a filter or
    O(days) given where it does not apply fails the task rather than being ignored.
author:
  - Sentinel Heal Maintainers (@sentinel-heal)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - sentinel.heal.controller
  - sentinel.heal.controller.memory
  - sentinel.heal.controller.attributes
attributes:
  check_mode:
    support: full
    details: Nothing is written; the result says what would be (RV(dest), RV(count) or RV(episode_count)), and is C(changed).
options:
  format:
    description: What to export.
    type: str
    default: episodes
    choices: [episodes, audit, history]
  dest:
    description:
      - The file to write on the controller - JSON (O(format=episodes)), JSON Lines (O(format=audit)) or HTML
        (O(format=history)).
      - Required with O(format=history); without it, the episodes or the audit records are returned instead.
    type: path
  days:
    description:
      - With O(format=audit) and O(format=history), the window - the episodes that started in the last this many days (more
        than 0, at most 3660). O(format=history) takes 7 when it is not set; O(format=audit) takes every episode.
    type: float
  host:
    description: With O(format=episodes), only the episodes of this inventory host.
    type: str
  service:
    description: With O(format=episodes), only the episodes of this service.
    type: str
  outcome:
    description: With O(format=episodes), only the episodes with this outcome.
    type: str
    choices: [awaiting_approval, blocked, deferred, denied, escalated, failed, flapping, fleet, halted, healed, in_progress_elsewhere,
              interrupted, silenced, suspended, unreachable]
  fingerprint:
    description: With O(format=episodes), only the episodes of this failure fingerprint.
    type: str
  limit:
    description: With O(format=episodes), at most this many episodes, the newest (1-100000).
    type: int
    default: 50
seealso:
  - module: sentinel.heal.memory_info
  - module: sentinel.heal.memory_prune
"""

EXAMPLES = r"""
- name: Export everything for the postmortem
  sentinel.heal.memory_export:
    limit: 100000
    dest: /tmp/sentinel-episodes.json
  run_once: true
  delegate_to: localhost

- name: What happened in the last 7 days, as one HTML page
  sentinel.heal.memory_export:
    format: history
    days: 7
    dest: /tmp/sentinel-heal-history.html
  run_once: true
  delegate_to: localhost

- name: The audit trail of the last day, for the SIEM
  sentinel.heal.memory_export:
    format: audit
    days: 1
    dest: /var/log/sentinel-heal-audit.jsonl
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
episodes:
  description: With O(format=episodes) and no O(dest), the episodes, newest first, whole.
  returned: with format episodes and no dest
  type: list
  elements: dict
records:
  description: With O(format=audit) and no O(dest), the audit records of the window, oldest first (the episodes', then the approval page's).
  returned: with format audit and no dest
  type: list
  elements: dict
dest:
  description: The file written (in check mode, the file that would be).
  returned: with dest
  type: str
count:
  description: How many episodes (O(format=episodes)) or audit records (O(format=audit)) were written, or would be.
  returned: with dest, format episodes or audit
  type: int
episode_count:
  description: How many episodes of the window it read.
  returned: with format history, and with format audit and dest (not in check mode)
  type: int
incident_count:
  description: How many incidents the window holds.
  returned: with format history, not in check mode
  type: int
"""
