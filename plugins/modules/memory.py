#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# This module is implemented as the action plugin plugins/action/memory.py; this file holds its documentation.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: memory
short_description: Read and decide what sentinel.heal's memory holds on the controller
version_added: 0.1.0
description:
  - Works on the SQLite memory in O(state_dir) on the controller, whatever host the task runs for.
  - C(plans) lists the stored plans (those that wait for approval by default), C(plan) shows one,
    C(deny) refuses one so it can never run. Each plan shows its steps as argv, escaped, never as a
    raw command string.
  - To approve (run) a plan use M(sentinel.heal.execute), or C(playbooks/approve.yml).
author:
  - Sentinel Heal Maintainers (@sentinel-heal)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
attributes:
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
options:
  operation:
    description: What to do.
    type: str
    required: true
    choices: [plans, plan, deny]
  state_dir:
    description: Directory of the memory on the controller.
    type: path
    default: ~/.local/state/sentinel-heal
  plan_id:
    description: The plan to show or deny.
    type: str
  status:
    description: Which plans C(plans) lists.
    type: str
    default: pending
    choices: [all, denied, executed, pending, running]
  decided_by:
    description: Who denies the plan (recorded with it). Required to deny.
    type: str
  note:
    description: Why the plan is denied.
    type: str
    default: ""
seealso:
  - module: sentinel.heal.execute
  - module: sentinel.heal.heal
"""

EXAMPLES = r"""
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
"""

RETURN = r"""
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
"""
