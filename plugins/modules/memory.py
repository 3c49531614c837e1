#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# This module is implemented as the action plugin plugins/action/memory.py; this file holds its documentation.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: memory
short_description: Read, export, prune and decide what sentinel.heal's memory holds on the controller (deprecated)
version_added: 0.1.0
deprecated:
  removed_in: 1.0.0
  why: >-
    One module per concern, named for what it does or changes, each with its own options and an honest check mode, the
    Ansible way.
  alternative: >-
    sentinel.heal.memory_info (episodes, episode, search, plans, plan, silences, suspension), sentinel.heal.memory_export
    (export, report), sentinel.heal.memory_prune (prune, forget), sentinel.heal.silence (silence, unsilence),
    sentinel.heal.suspension (suspend, resume), sentinel.heal.approval (deny) and sentinel.heal.flapping_reset
    (reset_flapping).
  removed_from_collection: sentinel.heal
description:
  - Deprecated - each operation warns, naming the module and the form that replace it, and is done by that module's
    code, with the same results.
  - Works on the memory on the controller, whatever host the task runs for - the SQLite file in O(state_dir), or the
    PostgreSQL database of O(memory_url).
  - Episodes (one per attempt at healing an incident) - C(episodes) lists them (filter by O(host),
    O(service), O(outcome), O(fingerprint)), C(episode) shows one whole, C(search) ranks them by how
    alike their error reads to O(text) (full-text search - SQLite FTS5, or PostgreSQL's own), C(export) writes them as JSON to O(dest) (or
    returns them; with O(format=audit), the audit trail of the last O(days) as JSON Lines, one record per decision and action,
    whose fields R(the reports guide,ansible_collections.sentinel.heal.docsite.reports) (C(docs/docsite/rst/reports.rst))
    documents), C(prune) forgets those older than O(older_than_days) (not those a stored plan refers to) and deletes
    the ansible-runner run directories under O(state_dir)/runs older than that
    which no remaining episode points to (in check mode it counts them and removes nothing), C(forget)
    forgets every episode and plan of one failure O(fingerprint).
  - History - C(report) writes to O(dest) one self-contained HTML page (inline CSS and SVG charts, no script) of what
    happened in the last O(days) (7 by default) - incidents and heal rate per service per day, time to heal, the failures
    seen most, the plans that failed most, and in full every incident that still needs a person, with the cause in the
    service's own words and what to do next. Also C(sentinel.heal.report).
  - Plans - C(plans) lists the stored plans (those that wait for approval by default), C(plan) shows
    one, C(deny) refuses one so it can never run. Each plan shows its steps as argv, escaped, never
    as a raw command string.
  - To approve (run) a plan use M(sentinel.heal.execute), or C(sentinel.heal.approve).
  - The kill switch - C(suspend) stops every autonomous remediation of every job that shares O(state_dir),
    jobs already running included - a remediation not yet started does not start, one running is
    cancelled before its next step, and the incident ends C(suspended); approved plans do not run
    either (they stay pending). Checks, evidence reads and check mode still run. The switch records
    O(decided_by), when, and O(note) (why); C(resume) releases it (recording who), C(suspension) shows
    it. Also C(sentinel.heal.suspend).
  - The flapping limit - C(reset_flapping) says that the past remediations of O(service) on O(host) no longer count
    against its limit (recording O(decided_by); nothing is forgotten). See O(sentinel.heal.heal#module:flap_limit).
  - Silences - C(silence) says "hands off" O(host) (an inventory host or group name, or a shell-style pattern of
    them such as C(web*)) and O(service) (all services when omitted) for O(duration), recording O(decided_by) and
    O(note) (why). While it holds, M(sentinel.heal.heal) still checks the service and reports it C(silenced) with
    who, why and until when; nothing is planned, approved or executed. A pattern that matches no host or group of the
    inventory is kept, with a warning. C(unsilence) lifts the silences of O(silence_id), or of O(host) (and
    O(service)); C(silences) lists those in force. Also C(sentinel.heal.silence).
author:
  - Sentinel Heal Maintainers (@sentinel-heal)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - sentinel.heal.controller
  - sentinel.heal.controller.memory
  - sentinel.heal.controller.attributes
options:
  operation:
    description: What to do.
    type: str
    required: true
    choices: [episodes, episode, search, export, report, prune, forget, plans, plan, deny, suspend, resume, suspension, reset_flapping,
              silence, unsilence, silences]
  episode_id:
    description: The episode to show.
    type: int
  host:
    description:
      - Only episodes of this inventory host; with C(reset_flapping), the host whose count is reset; with C(silence)
        and C(unsilence), the hosts silenced (a host or group name, or a shell-style pattern).
    type: str
  service:
    description:
      - Only episodes of this service; with C(reset_flapping), the service whose count is reset; with C(silence), the
        service silenced (all when omitted; a shell-style pattern is allowed).
    type: str
  outcome:
    description: Only episodes with this outcome.
    type: str
    choices: [awaiting_approval, blocked, deferred, denied, escalated, failed, flapping, fleet, halted, healed, in_progress_elsewhere,
              interrupted, silenced, suspended, unreachable]
  fingerprint:
    description: Only episodes of this failure fingerprint; with C(forget), the fingerprint to forget.
    type: str
  text:
    description: With C(search), the error text to look for.
    type: str
  limit:
    description: At most this many episodes (1-100000).
    type: int
    default: 50
  dest:
    description:
      - With C(export), the file to write on the controller (written whole or not at all) - JSON, or JSON Lines with
        O(format=audit).
      - With C(report), the HTML file to write (required).
    type: path
  format:
    description:
      - What C(export) writes - C(episodes), the episodes as one JSON document, or C(audit), the audit trail of the
        window (O(days)) as JSON Lines - one record per decision and action (incident opened, evidence, plan, verdict,
        approval, step executed, verification, outcome) with the episode id, the plan hash, the policy version, the
        approver, the ansible-runner run directories and UTC ISO 8601 times.
    type: str
    default: episodes
    choices: [episodes, audit]
  days:
    description:
      - The window of C(report) and of C(export) with O(format=audit) - the episodes that started in the last this many
        days. C(report) takes 7 when it is not set; the audit export takes every episode.
    type: float
  older_than_days:
    description: With C(prune), forget episodes that finished more than this many days ago.
    type: float
  plan_id:
    description: The plan to show or deny.
    type: str
  status:
    description: Which plans C(plans) lists.
    type: str
    default: pending
    choices: [all, denied, executed, pending, running]
  decided_by:
    description:
      - Who denies the plan, suspends or resumes healing, resets a flapping count or sets or lifts a silence (recorded
        with it). Required for C(deny), C(suspend), C(resume), C(reset_flapping), C(silence) and C(unsilence).
    type: str
  note:
    description: Why the plan is denied, why healing is suspended or why the hosts are silenced (required to suspend and to silence).
    type: str
    default: ""
  duration:
    description: How long a silence holds - seconds, or a number with C(s), C(m), C(h) or C(d) (C(90m), C(2h)); at most 90 days.
    type: str
  silence_id:
    description: The silence to lift (C(unsilence)); see C(silences).
    type: int
seealso:
  - module: sentinel.heal.memory_info
  - module: sentinel.heal.memory_export
  - module: sentinel.heal.memory_prune
  - module: sentinel.heal.silence
  - module: sentinel.heal.suspension
  - module: sentinel.heal.approval
  - module: sentinel.heal.flapping_reset
"""

EXAMPLES = r"""
- name: What happened to nginx on web1 lately
  sentinel.heal.memory:
    operation: episodes
    host: web1
    service: nginx
    limit: 10
  run_once: true

- name: Export everything for the postmortem
  sentinel.heal.memory:
    operation: export
    limit: 100000
    dest: /tmp/sentinel-episodes.json
  run_once: true

- name: What happened in the last 7 days, as one HTML page
  sentinel.heal.memory:
    operation: report
    days: 7
    dest: /tmp/sentinel-heal-history.html
  run_once: true

- name: The audit trail of the last day, for the SIEM
  sentinel.heal.memory:
    operation: export
    format: audit
    days: 1
    dest: /var/log/sentinel-heal-audit.jsonl
  run_once: true

- name: Forget what is older than 90 days
  sentinel.heal.memory:
    operation: prune
    older_than_days: 90
  run_once: true

- name: List the plans waiting for approval
  sentinel.heal.memory:
    operation: plans
  register: waiting
  run_once: true
  delegate_to: localhost

- name: Deny one
  sentinel.heal.memory:
    operation: deny
    plan_id: 8c1e4bd1f0b44f0aa7d9f3b1e2c0a6d5
    decided_by: alice
    note: not during the sale

- name: Stop all healing now, everywhere (the kill switch)
  sentinel.heal.memory:
    operation: suspend
    decided_by: "{{ awx_user_name | default(lookup('env', 'USER')) }}"
    note: database failover in progress
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
episodes:
  description: With C(episodes), C(search) and C(export) without O(dest), the episodes found, newest (or best) first.
  returned: when operation is episodes, search or export
  type: list
  elements: dict
episode:
  description: With C(episode), the whole episode, with its evidence, plan, verdicts and results.
  returned: when operation is episode
  type: dict
removed:
  description: With C(prune) and C(forget), how many episodes were forgotten.
  returned: when operation is prune or forget
  type: int
runs_removed:
  description: With C(prune), how many ansible-runner run directories were deleted.
  returned: when operation is prune
  type: int
dest:
  description: With C(export) and O(dest), and with C(report), the file written.
  returned: when operation is export with dest, or report
  type: str
count:
  description: With C(export) and O(dest), how many episodes were written (audit records with O(format=audit)).
  returned: when operation is export with dest
  type: int
records:
  description: With C(export), O(format=audit) and no O(dest), the audit records of the window, oldest first.
  returned: when operation is export with format audit and no dest
  type: list
  elements: dict
episode_count:
  description: With C(report), and C(export) with O(format=audit) and O(dest), how many episodes of the window it read.
  returned: when operation is report, or export with format audit and dest
  type: int
incident_count:
  description: With C(report), how many incidents the window holds.
  returned: when operation is report
  type: int
plans:
  description: With C(plans), the plans found, newest first, each with C(plan_id), C(host), C(service), C(status), C(steps)
    (C(argv) and C(command)), C(rationale), C(source), C(failure), C(policy_version), C(created_at), C(expires_at) and C(decided_by).
  returned: when operation is plans
  type: list
  elements: dict
plan:
  description: With C(plan) or C(deny), the plan, with the keys listed for C(plans).
  returned: when operation is plan or deny
  type: dict
silences:
  description:
    - The silences in force (C(silences)), the one set (C(silence)) or those lifted (C(unsilence)) - each with C(id),
      C(hosts), C(service), C(reason), C(set_by), C(set_at), C(until), C(lifted_at), C(lifted_by).
  returned: with C(silence), C(unsilence) and C(silences)
  type: list
  elements: dict
suspended:
  description: With C(suspend), C(resume) and C(suspension), whether healing is suspended now.
  returned: when operation is suspend, resume or suspension
  type: bool
suspension:
  description:
    - The suspension in force (or, after C(resume), the one just ended) - C(suspended_at), C(suspended_by), C(reason),
      C(resumed_at), C(resumed_by); null when there is none.
  returned: when operation is suspend, resume or suspension
  type: dict
"""
