#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# This module is implemented as the action plugin plugins/action/silence.py; this file holds its documentation.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: silence
short_description: Set or lift a silence - sentinel.heal keeps its hands off some hosts and a service for a while
version_added: 0.2.0
description:
  - O(state=present) says "hands off" O(host) (an inventory host or group name, or a shell-style pattern of them such as
    C(web*)) and O(service) (all services when omitted) for O(duration), recording O(decided_by) and O(note) (why).
    While it holds, M(sentinel.heal.heal) still checks the service and reports it C(silenced) with who, why and until
    when; nothing is planned, approved or executed. A pattern that matches no host or group of the inventory is kept,
    with a warning. Each run sets a new silence.
  - O(state=absent) lifts the silences in force of O(silence_id), or of O(host) (as it was written when set) and, when
    given, O(service), recording O(decided_by).
  - The silences live in the memory on the controller, whatever host the task runs for - the SQLite file in
    O(state_dir), or the PostgreSQL database of O(memory_url) - so every job, fork and AWX node that shares it honours
    them. M(sentinel.heal.memory_info) with O(sentinel.heal.memory_info#module:kind=silences) lists them;
    C(sentinel.heal.silence), the playbook, sets, lifts and lists them.
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
    details:
      - Sets and lifts nothing. O(state=present) checks the options (the duration, the pattern against the inventory) and
        reports C(changed); O(state=absent) returns the silences it would lift and is C(changed) only when there are some.
options:
  state:
    description: C(present) sets a silence, C(absent) lifts silences.
    type: str
    default: present
    choices: [present, absent]
  host:
    description:
      - The hosts silenced - an inventory host or group name, or a shell-style pattern of them (C(web*)). Required with
        O(state=present).
      - With O(state=absent), lift the silences set for exactly this (unless O(silence_id) is given).
    type: str
  service:
    description:
      - The service silenced (a shell-style pattern is allowed); all services when omitted.
      - With O(state=absent) and O(host), lift only the silences of this service.
    type: str
  duration:
    description:
      - How long the silence holds - seconds, or a number with C(s), C(m), C(h) or C(d) (C(90m), C(2h)); more than
        nothing and at most 90 days. Required with O(state=present).
    type: str
  decided_by:
    description: Who sets or lifts the silence (recorded with it, shown by every job it holds back).
    type: str
    required: true
  note:
    description: Why (shown by every job the silence holds back). Required with O(state=present).
    type: str
  silence_id:
    description:
      - With O(state=absent), the silence to lift (see M(sentinel.heal.memory_info) O(sentinel.heal.memory_info#module:kind=silences)).
      - O(state=absent) needs O(silence_id) or O(host).
    type: int
seealso:
  - module: sentinel.heal.memory_info
  - module: sentinel.heal.suspension
  - module: sentinel.heal.heal
"""

EXAMPLES = r"""
- name: Hands off nginx on the web servers while the disks are swapped
  sentinel.heal.silence:
    host: "web*"
    service: nginx
    duration: 2h
    decided_by: "{{ awx_user_name | default(lookup('env', 'USER')) }}"
    note: disk swap
  run_once: true
  delegate_to: localhost

- name: Done early - lift it
  sentinel.heal.silence:
    state: absent
    host: "web*"
    service: nginx
    decided_by: "{{ awx_user_name | default(lookup('env', 'USER')) }}"
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
silences:
  description:
    - O(state=present) - the silence set (empty in check mode); O(state=absent) - those lifted (in check mode, those that
      would be, as they are) - each with C(id), C(hosts), C(service), C(reason), C(set_by), C(set_at), C(until),
      C(lifted_at), C(lifted_by).
  returned: always
  type: list
  elements: dict
msg:
  description: The silence set, in words - hosts, service, who, until when, why.
  returned: with state present, not in check mode
  type: str
"""
