#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# This module is implemented as the action plugin plugins/action/approval.py; this file holds its documentation.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: approval
short_description: Deny a plan that waits for a person, so that it never runs
version_added: 0.2.0
description:
  - Decides a plan that M(sentinel.heal.heal) stored for a person (the guard said approve, or the mode is C(review)) -
    O(decision=denied) refuses it for good (its status becomes C(denied)), recording O(decided_by), when and O(note).
  - Approving a plan is running it - M(sentinel.heal.execute) on its host, or C(sentinel.heal.approve) (the playbook
    C(playbooks/approve.yml), which lists, denies and runs plans). This module never runs anything.
  - The plans live in the memory on the controller, whatever host the task runs for - the SQLite file in O(state_dir),
    or the PostgreSQL database of O(memory_url). M(sentinel.heal.memory_info) with
    O(sentinel.heal.memory_info#module:kind=plans) lists them.
  - A plan that is no longer pending (run, running or denied already) fails the task, naming it and its status.
  - A denial tells the O(notify) destinations who denied the plan and why, once (C(denied); PagerDuty acknowledges
    the page the plan's wait opened, under the same C(dedup_key)). A destination that is slow or down never fails the
    denial.
author:
  - Sentinel Heal Maintainers (@sentinel-heal)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - sentinel.heal.controller
  - sentinel.heal.controller.memory
  - sentinel.heal.controller.attributes
  - sentinel.heal.notify
attributes:
  check_mode:
    support: full
    details: Denies nothing and tells nobody; fails as the denial would on a plan that is not pending, else returns the plan and reports C(changed).
options:
  plan_id:
    description: The plan to decide.
    type: str
    required: true
  decision:
    description:
      - The decision - C(denied), the one a person makes here (required, so that no task reads as an approval).
      - To approve, run the plan - M(sentinel.heal.execute), or C(sentinel.heal.approve).
    type: str
    required: true
    choices: [denied]
  decided_by:
    description: Who decides (recorded with the plan).
    type: str
    required: true
  note:
    description: Why (recorded with the plan).
    type: str
    default: ""
seealso:
  - module: sentinel.heal.execute
  - module: sentinel.heal.memory_info
  - module: sentinel.heal.heal
"""

EXAMPLES = r"""
- name: Not during the sale
  sentinel.heal.approval:
    plan_id: 8c1e4bd1f0b44f0aa7d9f3b1e2c0a6d5
    decision: denied
    decided_by: alice
    note: not during the sale
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
plan:
  description:
    - The plan as decided (in check mode, as it is) - C(plan_id), C(host), C(service), C(status), C(steps) (C(argv) and
      C(command)), C(rationale), C(source), C(failure), C(policy_version), C(created_at), C(expires_at) and C(decided_by).
  returned: always
  type: dict
notifications:
  description:
    - What became of the denial's message to each O(notify) destination, as M(sentinel.heal.heal) returns it; one not
      delivered is a warning too.
  returned: when O(notify) sent or skipped a message
  type: list
  elements: dict
"""
