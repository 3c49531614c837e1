#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# This module is implemented as the action plugin plugins/action/execute.py; this file holds its documentation.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: execute
short_description: Run plans a human approved, exactly as they were stored, and verify them
version_added: 0.1.0
description:
  - Runs stored plans (see M(sentinel.heal.heal)) that waited for approval, on the host the task runs for.
  - Every plan is checked before any runs, and one refusal means nothing runs - the plan must still be
    pending, not expired, made for this very host, unchanged (its hash, bound to its steps, host,
    service and policy version, must match) and judged by the same policy as today's, which must
    not block any of its steps now.
  - A plan is claimed before it runs, so of two approvals racing for it only one runs it.
  - Steps run with ansible-runner like the heal loop's, then M(sentinel.heal.service_check) verifies
    the service; the outcome is recorded as an episode with who approved it. A failed approved plan
    is escalated, not followed by other plans.
  - Once the plans ran, the O(notify) destinations are told - that a person approved each (PagerDuty acknowledges the
    page the plan's wait opened, under the same C(dedup_key)), then how it ended, C(resolved) or C(escalated) with what
    was tried, naming who approved it. A destination that is slow or down never holds a plan back nor fails the task.
  - In check mode the plans are only checked; nobody is told.
author:
  - Sentinel Heal Maintainers (@sentinel-heal)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - sentinel.heal.controller
  - sentinel.heal.controller.memory
  - sentinel.heal.controller.verification
  - sentinel.heal.controller.attributes
  - sentinel.heal.controller.steps
  - sentinel.heal.controller.privilege
  - sentinel.heal.controller.limits
  - sentinel.heal.notify
options:
  plan_ids:
    description: The approved plans to run on this host.
    type: list
    elements: str
    required: true
  approved_by:
    description: Who approved the plans; recorded with each plan and episode.
    type: str
    required: true
  approval_key:
    description:
      - With O(step_privilege=executor), the approver's SSH key (a private key, or a public key whose private half
        ssh-agent holds) that signs each plan for the executor on its host. The executor runs a step the policy sends
        to a person only with a signature by a key the host lists (the role C(sentinel.heal.host)'s C(host_approvers),
        under the name O(approved_by)), over that host, the service and the plan's steps, valid for 15 minutes and once
        per step.
      - Without it, the host refuses such steps and the plan escalates as blocked.
    type: path
    default: ""
  policy:
    description: The policy file that re-validates the plans. Defaults to the file that judged each plan.
    type: path
  verify_retries:
    description: How many times verification checks the service before the plan counts as failed.
    type: int
    default: 3
  redact_values:
    description: More literal secrets to mask, in addition to those the play knows.
    type: list
    elements: str
    default: []
seealso:
  - module: sentinel.heal.heal
  - module: sentinel.heal.memory_info
  - module: sentinel.heal.approval
"""

EXAMPLES = r"""
- name: Run the plan Alice approved
  sentinel.heal.execute:
    plan_ids: [8c1e4bd1f0b44f0aa7d9f3b1e2c0a6d5]
    approved_by: alice
  become: true

- name: Run it with the executor on the host, signed with Alice's key (listed in host_approvers)
  sentinel.heal.execute:
    plan_ids: [8c1e4bd1f0b44f0aa7d9f3b1e2c0a6d5]
    approved_by: alice
    step_privilege: executor
    approval_key: ~/.ssh/id_ed25519.pub
"""

RETURN = r"""
status:
  description: The worst end state of the plans run - C(healed), C(escalated) or C(unreachable).
  returned: always
  type: str
  sample: healed
incidents:
  description: One entry per plan run, as M(sentinel.heal.heal) returns them.
  returned: always
  type: list
  elements: dict
summary:
  description: One human line per plan run.
  returned: always
  type: list
  elements: str
episodes:
  description: Ids of the episodes written.
  returned: always
  type: list
  elements: int
notifications:
  description:
    - What became of each message to the O(notify) destinations, as M(sentinel.heal.heal) returns it - C(destination)
      (its name, never its URL), C(type), C(event), C(key), C(incident_id), C(delivered), C(tries), C(error), C(skipped);
      one not delivered is a warning too.
  returned: when O(notify) sent or skipped a message
  type: list
  elements: dict
"""
