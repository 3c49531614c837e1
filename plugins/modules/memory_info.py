#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# This module is implemented as the action plugin plugins/action/memory_info.py; this file holds its documentation.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: memory_info
short_description: Read what sentinel.heal's memory holds on the controller - episodes, plans, silences, the kill switch
version_added: 0.2.0
description:
  - Reads the memory on the controller, whatever host the task runs for - the SQLite file in O(state_dir), or the
    PostgreSQL database of O(memory_url). Never changes what it holds.
  - O(kind=episodes) (one per attempt at healing an incident) - the latest, filtered by O(host), O(service),
    O(outcome) and O(fingerprint); or one whole, with O(episode_id); or those whose error reads most like O(text), best
    first (full-text search - SQLite FTS5, or PostgreSQL's own).
  - O(kind=plans) - the stored plans, those that wait for approval by default (O(status)); or one, with O(plan_id). Each
    plan shows its steps as argv, escaped, never as a raw command string. To deny one use M(sentinel.heal.approval); to
    approve (run) one, M(sentinel.heal.execute) or C(sentinel.heal.approve).
  - O(kind=silences) - the silences in force (M(sentinel.heal.silence)).
  - O(kind=suspension) - whether healing is suspended, by whom, when and why (the kill switch, M(sentinel.heal.suspension)).
  - O(kind=fleet_incidents) - the latest fleet incidents (many hosts failing the same way within a window, healed as one
    incident - see the C(fleet_min_hosts) option of M(sentinel.heal.heal)), the newest first, at most O(limit); open
    ones have no C(closed_at).
  - An option of another kind than O(kind) (O(plan_id) with O(kind=episodes), O(host) with O(kind=plans)) fails the
    task, naming the option and its value, rather than being ignored.
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
    details: It only reads; check mode answers the same.
options:
  kind:
    description: What to read.
    type: str
    default: episodes
    choices: [episodes, plans, silences, suspension, fleet_incidents]
  episode_id:
    description: With O(kind=episodes), the one episode to show whole (it takes no filter, nor O(text)).
    type: int
  text:
    description:
      - With O(kind=episodes), the error text to look for - the episodes whose error reads most like it, best first, at
        most O(limit) (it takes no filter).
    type: str
  host:
    description: With O(kind=episodes), only the episodes of this inventory host.
    type: str
  service:
    description: With O(kind=episodes), only the episodes of this service.
    type: str
  outcome:
    description: With O(kind=episodes), only the episodes with this outcome.
    type: str
    choices: [awaiting_approval, blocked, deferred, denied, escalated, failed, flapping, fleet, halted, healed, in_progress_elsewhere,
              interrupted, silenced, suspended, unreachable]
  fingerprint:
    description: With O(kind=episodes), only the episodes of this failure fingerprint.
    type: str
  limit:
    description: With O(kind=episodes) or O(kind=fleet_incidents), at most this many (1-100000).
    type: int
    default: 50
  plan_id:
    description: With O(kind=plans), the one plan to show.
    type: str
  status:
    description: With O(kind=plans), which plans to list.
    type: str
    default: pending
    choices: [all, denied, executed, pending, running]
seealso:
  - module: sentinel.heal.memory_export
  - module: sentinel.heal.approval
  - module: sentinel.heal.silence
  - module: sentinel.heal.suspension
"""

EXAMPLES = r"""
- name: What happened to nginx on web1 lately
  sentinel.heal.memory_info:
    host: web1
    service: nginx
    limit: 10
  register: lately
  run_once: true
  delegate_to: localhost

- name: The episodes whose error reads like this one
  sentinel.heal.memory_info:
    text: "bind() to 0.0.0.0:80 failed (98: Address already in use)"
  run_once: true
  delegate_to: localhost

- name: One episode whole - its evidence, plan, verdicts and results
  sentinel.heal.memory_info:
    episode_id: 42
  run_once: true
  delegate_to: localhost

- name: The plans that wait for approval
  sentinel.heal.memory_info:
    kind: plans
  register: waiting
  run_once: true
  delegate_to: localhost

- name: Is healing suspended?
  sentinel.heal.memory_info:
    kind: suspension
  register: switch
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
episodes:
  description:
    - The episodes found, newest first (with O(text), the best match first) - each with C(id), C(incident_id), C(attempt),
      C(host), C(service), C(fingerprint), C(failure_class), C(error_text), C(plan_source), C(plan_reference), C(outcome),
      C(verified), C(approved_by), C(started_at) and C(finished_at).
    - A relapse (the service failed again within the heal's O(sentinel.heal.heal#module:relapse_window) after a heal) shows
      on both sides - each episode of the incident that followed has C(relapsed_from), the id of the heal it came back
      after (null otherwise); that heal has C(relapsed_at), when it failed again, and C(relapsed_after_s), how long it
      held (both null for a heal that held, and for any other outcome). A plan whose heal relapsed is no longer replayed
      as a verified fix.
  returned: with kind episodes, without episode_id
  type: list
  elements: dict
episode:
  description: The whole episode, with its evidence, plan, verdicts and results.
  returned: with kind episodes and episode_id
  type: dict
plans:
  description: The plans found, newest first, each with C(plan_id), C(host), C(service), C(status), C(steps)
    (C(argv) and C(command)), C(rationale), C(source), C(failure), C(policy_version), C(created_at), C(expires_at) and C(decided_by).
  returned: with kind plans, without plan_id
  type: list
  elements: dict
plan:
  description: The plan, with the keys listed for RV(plans).
  returned: with kind plans and plan_id
  type: dict
silences:
  description:
    - The silences in force, the one that ends last first - each with C(id), C(hosts), C(service), C(reason), C(set_by),
      C(set_at), C(until), C(lifted_at), C(lifted_by).
  returned: with kind silences
  type: list
  elements: dict
suspended:
  description: Whether healing is suspended now.
  returned: with kind suspension
  type: bool
suspension:
  description:
    - The suspension in force - C(suspended_at), C(suspended_by), C(reason), C(resumed_at), C(resumed_by); null when there is none.
  returned: with kind suspension
  type: dict
fleet_incidents:
  description:
    - The latest fleet incidents, the newest first - each with C(id), C(service), C(failure_class), C(summary) (as the
      first host said it), C(hosts), C(first_seen) and C(last_seen) (epoch seconds), C(common) (what the hosts' evidence
      has in common, in words - the same address or name, package change, changed file, full filesystem, error line),
      C(cleared) (the hosts seen without the failure since), C(closed_at) (null while open) and C(signature).
  returned: with kind fleet_incidents
  type: list
  elements: dict
"""
