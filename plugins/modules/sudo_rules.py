#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: sudo_rules
short_description: Check that one rule is all sudo lets an account run
version_added: 0.1.0
description:
  - Asks sudo which rules apply to O(account) (C(sudo -l -U)) and fails when any rule besides O(only_rule) does,
    naming each one and the sudoers lines (file and line) that may grant it - unless O(allow_others) says they are
    meant to stay.
  - >-
    The role C(sentinel.heal.host) runs it after it makes the executor the healing account's sudo rule: an account
    that keeps a C(NOPASSWD: ALL) from provisioning can walk around every check the executor makes.
  - Needs root (C(become)) to list another account's rules. Runs with the standard library of the target's Python only.
author:
  - Sentinel Heal Maintainers (@sentinel-heal)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: It only reads.
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
options:
  account:
    description: The account whose rules are checked.
    type: str
    required: true
  only_rule:
    description:
      - >-
        The one rule the account is meant to have, as C(sudo -l) prints it
        (C(\(root\) NOPASSWD: /usr/libexec/sentinel-heal/exec "")).
    type: str
    required: true
  allow_others:
    description: Report the other rules without failing - they are meant to stay, and the host is not enforced.
    type: bool
    default: false
"""

EXAMPLES = r"""
- name: The executor is the healing account's only sudo rule
  become: true
  sentinel.heal.sudo_rules:
    account: sentinel
    only_rule: '(root) NOPASSWD: /usr/libexec/sentinel-heal/exec ""'
"""

RETURN = r"""
only:
  description: Whether O(only_rule) is all sudo lets the account run.
  returned: always
  type: bool
  sample: false
other_rules:
  description:
    - >-
      The rules besides O(only_rule), each with C(rule) (as C(sudo -l) prints it) and C(granted_by) (the sudoers lines
      that may grant it, C(FILE:LINE: text)).
  returned: always
  type: list
  elements: dict
  sample: [{"rule": "(ALL) NOPASSWD: ALL", "granted_by": ["/etc/sudoers.d/sentinel:1: sentinel ALL=(ALL) NOPASSWD:ALL"]}]
"""

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sentinel.heal.plugins.module_utils._host.sudo_rules import other_sudo_rules


def main():
    module = AnsibleModule(argument_spec=dict(account=dict(type="str", required=True), only_rule=dict(type="str", required=True),
                                              allow_others=dict(type="bool", default=False)), supports_check_mode=True)
    others = other_sudo_rules(module.params["account"], module.params["only_rule"])
    if others and not module.params["allow_others"]:
        said = "; ".join("%s (%s)" % (other["rule"], ", ".join(other["granted_by"]) or "granted by no line of the sudoers files") for other in others)
        module.fail_json(msg="%s has sudo rules besides the executor, so it can walk around it: %s. Remove them, or set "
                             "host_other_sudo_rules_stay to keep them (the host then runs without enforcement)" % (module.params["account"], said),
                         only=False, other_rules=others)
    module.exit_json(changed=False, only=not others, other_rules=others)


if __name__ == "__main__":
    main()
