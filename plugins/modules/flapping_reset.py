#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# This module is implemented as the action plugin plugins/action/flapping_reset.py; this file holds its documentation.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: flapping_reset
short_description: Let sentinel.heal remediate a flapping service again - its past remediations no longer count
version_added: 0.2.0
description:
  - The flapping limit (O(sentinel.heal.heal#module:flap_limit)) leaves a service that was remediated again and again
    for a person. Once a person has looked at it, this says that the past remediations of O(service) on O(host) no
    longer count against the limit, recording O(decided_by) and when. Nothing is forgotten - the episodes stay.
  - Works on the memory on the controller, whatever host the task runs for - the SQLite file in O(state_dir), or the
    PostgreSQL database of O(memory_url); every job that shares it counts from the reset on.
  - Each run records a reset, so the task always reports C(changed).
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
    details: Records nothing and reports C(changed), as the reset would be.
options:
  host:
    description: The inventory host whose count is reset.
    type: str
    required: true
  service:
    description: The service whose count is reset.
    type: str
    required: true
  decided_by:
    description: Who resets it (recorded with the reset).
    type: str
    required: true
seealso:
  - module: sentinel.heal.heal
  - module: sentinel.heal.memory_info
"""

EXAMPLES = r"""
- name: The port squatter on web1 is gone for good - let nginx be healed again
  sentinel.heal.flapping_reset:
    host: web1
    service: nginx
    decided_by: "{{ awx_user_name | default(lookup('env', 'USER')) }}"
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
# Only the common return values (changed).
"""
