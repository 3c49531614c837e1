#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# This module is implemented as the action plugin plugins/action/suspension.py; this file holds its documentation.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: suspension
short_description: Throw or release sentinel.heal's kill switch - every autonomous remediation stops
version_added: 0.2.0
description:
  - O(state=present) throws the kill switch - it stops every autonomous remediation of every job that shares the
    memory, jobs already running included. A remediation not yet started does not start, one running is cancelled
    before its next step, and the incident ends C(suspended); approved plans do not run either (they stay pending).
    Checks, evidence reads and check mode still run. The switch records O(decided_by), when, and O(note) (why). A
    switch already thrown stays as it was (who threw it first, and why).
  - O(state=absent) releases it, recording O(decided_by).
  - The switch lives in the memory on the controller, whatever host the task runs for - the SQLite file in
    O(state_dir), or the PostgreSQL database of O(memory_url). M(sentinel.heal.memory_info) with
    O(sentinel.heal.memory_info#module:kind=suspension) shows it; C(sentinel.heal.suspend), the playbook, throws, releases
    and shows it.
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
    details: Throws and releases nothing; C(changed) says whether it would (a switch already thrown, or none to release, is not).
options:
  state:
    description: C(present) throws the switch (suspends healing), C(absent) releases it (resumes healing).
    type: str
    default: present
    choices: [present, absent]
  decided_by:
    description: Who suspends or resumes healing (recorded with the switch, not blank).
    type: str
    required: true
  note:
    description: With O(state=present), why healing is suspended (required, not blank; every job that stops shows it).
    type: str
seealso:
  - module: sentinel.heal.memory_info
  - module: sentinel.heal.silence
  - module: sentinel.heal.heal
"""

EXAMPLES = r"""
- name: Stop all healing now, everywhere (the kill switch)
  sentinel.heal.suspension:
    decided_by: "{{ awx_user_name | default(lookup('env', 'USER')) }}"
    note: database failover in progress
  run_once: true
  delegate_to: localhost

- name: The failover is done - heal again
  sentinel.heal.suspension:
    state: absent
    decided_by: "{{ awx_user_name | default(lookup('env', 'USER')) }}"
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
suspended:
  description: Whether healing is suspended now (in check mode, would be).
  returned: always
  type: bool
suspension:
  description:
    - The suspension in force (with O(state=absent), the one just ended) - C(suspended_at), C(suspended_by), C(reason),
      C(resumed_at), C(resumed_by); null when there is none (and in check mode, for a switch not yet thrown).
  returned: always
  type: dict
"""
