#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# This module is implemented as the action plugin plugins/action/memory_prune.py; this file holds its documentation.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: memory_prune
short_description: Forget old episodes of sentinel.heal's memory and their runs, or every episode of one failure
version_added: 0.2.0
description:
  - Works on the memory on the controller, whatever host the task runs for - the SQLite file in O(state_dir), or the
    PostgreSQL database of O(memory_url).
  - With O(older_than_days), forgets the episodes that finished more than that many days ago, except those a stored plan
    refers to, and deletes the ansible-runner run directories under O(state_dir)/runs older than that which no remaining
    episode points to. The role does this once per play when C(autoheal_retention_days) is set.
  - With O(fingerprint), forgets every episode and stored plan of that failure fingerprint - what memory would replay
    for it, a fix that proved wrong included.
  - Give one of O(older_than_days) and O(fingerprint).
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
    details: Counts exactly what would be forgotten and deleted (RV(removed), RV(runs_removed)) and removes nothing.
options:
  older_than_days:
    description: Forget the episodes that finished more than this many days ago (not negative), and the runs left behind.
    type: float
  fingerprint:
    description: Forget every episode and stored plan of this failure fingerprint (see M(sentinel.heal.memory_info)).
    type: str
seealso:
  - module: sentinel.heal.memory_info
  - module: sentinel.heal.memory_export
"""

EXAMPLES = r"""
- name: Forget what is older than 90 days
  sentinel.heal.memory_prune:
    older_than_days: 90
  run_once: true
  delegate_to: localhost

- name: Forget one failure - memory replays nothing for it any more
  sentinel.heal.memory_prune:
    fingerprint: 3f1c9a0e2b7d4c55
  run_once: true
  delegate_to: localhost
"""

RETURN = r"""
removed:
  description: How many episodes were forgotten (in check mode, would be).
  returned: always
  type: int
runs_removed:
  description: With O(older_than_days), how many ansible-runner run directories were deleted (in check mode, would be).
  returned: with older_than_days
  type: int
"""
