#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# This module is implemented as the action plugin plugins/action/plan.py; this file holds its documentation.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: plan
short_description: Plan the repair of failed services and judge it with the policy, without running it
version_added: 0.1.0
description:
  - The heal loop of M(sentinel.heal.heal) up to the guard, for every failed service of the host - diagnose
    (read-only evidence commands the policy allows may run on the host), plan (memory, runbooks, the LLM
    when configured, a generic restart), guard - and nothing more (no step runs, nothing is written to
    memory), for your own workflows, reviews and change tickets.
  - In check mode the evidence commands do not run either.
author:
  - Sentinel Heal Maintainers (@sentinel-heal)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - sentinel.heal.controller
  - sentinel.heal.controller.memory
  - sentinel.heal.controller.attributes
  - sentinel.heal.controller.privilege
  - sentinel.heal.planning
  - sentinel.heal.planning.llm
options: {}
seealso:
  - module: sentinel.heal.heal
  - module: sentinel.heal.diagnose
"""

EXAMPLES = r"""
- name: What would sentinel.heal do about the failures?
  sentinel.heal.plan:
    services: "{{ autoheal_services }}"
  become: true
  register: proposal

- name: Open a change with the plans
  ansible.builtin.debug:
    msg: "{{ proposal.plans | map(attribute='plan') }}"
"""

RETURN = r"""
plans:
  description:
    - One entry per failed service - C(service), C(fingerprint), C(failure_class), C(summary), the C(plan)
      (C(source), C(reference), C(rationale), C(steps), C(escalation)), the guard's C(verdicts) and
      C(decision), C(reason), the C(path) through the loop, and C(llm) use.
  returned: always
  type: list
  elements: dict
decision:
  description: The strictest decision over all plans (C(allow), C(approve), C(block)); null when nothing failed.
  returned: always
  type: str
  sample: allow
"""
