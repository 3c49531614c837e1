#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# This module is implemented as the action plugin plugins/action/diagnose.py; this file holds its documentation.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: diagnose
short_description: What memory, the runbooks and read-only evidence say about failed services
version_added: 0.1.0
description:
  - The first step of the heal loop of M(sentinel.heal.heal), on its own, for every failed service of the
    host - the failure's fingerprint, a fix that memory verified before, the runbooks whose match holds,
    the output of the read-only evidence commands they ask for (only those the policy allows; they run on
    the host in one call of M(sentinel.heal.evidence)), similar failures fixed before and the plans that already failed.
  - Runs nothing else and writes nothing to memory. In check mode the evidence commands do not run.
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
options: {}
seealso:
  - module: sentinel.heal.plan
  - module: sentinel.heal.heal
"""

EXAMPLES = r"""
- name: Why is it down?
  sentinel.heal.diagnose:
    services: "{{ autoheal_services }}"
  become: true
  register: why

- name: Show the evidence
  ansible.builtin.debug:
    msg: "{{ why.diagnoses | map(attribute='evidence') }}"
"""

RETURN = r"""
diagnoses:
  description:
    - One entry per failed service - C(service), C(failure_class), C(summary), C(fingerprint), C(diagnosis),
      C(remembered_fix) (a plan, or null), C(reading) (what the service's own error lines say, most decisive first, each
      with C(kind) - not_installed, invalid_config, missing_dependency, no_space, address_in_use, permission or
      missing_path - the lines it C(said), their C(source), the C(path) and configuration C(place) they name, and the
      C(package_dir) that path is in when it is the service's own), the matching C(runbooks), the C(evidence) commands' results,
      C(similar_fixes) and C(failed_plans).
  returned: always
  type: list
  elements: dict
"""
