#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: evidence
short_description: Run the read-only evidence commands the heal loop's guard allowed, in one call
version_added: 0.1.0
description:
  - Runs each command (an argv, never through a shell) in order on the host and returns its exit code and output -
    what M(sentinel.heal.heal) and M(sentinel.heal.diagnose) read before they plan, over the play's own connection,
    in one module call.
  - It does not judge the commands - like M(ansible.builtin.command), it runs what it is given. The heal loop sends
    it only read-only commands its command policy decided C(allow), each with the privilege the policy's rule gave
    it.
  - A command with C(become) runs as root (through C(sudo -n --) with O(privilege=sudo)); one without runs as the
    user who logged in (the one C(sudo) names when the module itself runs with C(become)).
  - Runs with the standard library of the target's Python only.
author:
  - Sentinel Heal Maintainers (@sentinel-heal)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: The commands are read-only; they run in check mode too.
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
options:
  commands:
    description: The commands to run, in order.
    type: list
    elements: dict
    required: true
    suboptions:
      argv:
        description: The command's words.
        type: list
        elements: str
        required: true
      become:
        description: Whether it runs as root.
        type: bool
        default: false
  privilege:
    description: How a command with C(become) gets root - the task's own C(become), or C(sudo -n --).
    type: str
    choices: [become, sudo]
    default: become
  timeout:
    description: Seconds each command may run (1 to 3600); past it, it is killed and its C(rc) is null.
    type: int
    default: 30
seealso:
  - module: sentinel.heal.heal
  - module: sentinel.heal.policy_check
"""

EXAMPLES = r"""
- name: Read what nginx says about its configuration (as the heal loop does, after its guard allowed it)
  sentinel.heal.evidence:
    commands:
      - argv: [nginx, -t]
        become: true
  become: true
  register: read
"""

RETURN = r"""
results:
  description: One result per command, in order.
  returned: always
  type: list
  elements: dict
  contains:
    argv:
      description: The command as given.
      type: list
      elements: str
    rc:
      description: Its exit code, or null when it could not run or was killed at O(timeout) (the output says which).
      type: int
    output:
      description: Its standard output and error, at most 4000 characters (the middle cut out).
      type: str
    duration:
      description: Seconds it took.
      type: float
  sample:
    - argv: [nginx, -t]
      rc: 0
      output: "nginx: configuration file /etc/nginx/nginx.conf test is successful"
      duration: 0.012
"""

from ansible.module_utils import basic
from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sentinel.heal.plugins.module_utils._entries import checked_spec
from ansible_collections.sentinel.heal.plugins.module_utils._host.evidence import PRIVILEGES, EvidenceConfigError, read_evidence

ARGUMENT_SPEC = dict(
    commands=dict(type="list", elements="dict", required=True,
                  options=dict(argv=dict(type="list", elements="str", required=True), become=dict(type="bool", default=False))),
    privilege=dict(type="str", default="become", choices=list(PRIVILEGES)),
    timeout=dict(type="int", default=30),
)


def main():
    spec, entry_errors = checked_spec(ARGUMENT_SPEC, basic._load_params())
    module = AnsibleModule(argument_spec=spec, supports_check_mode=True)
    if entry_errors:
        module.fail_json(msg="; ".join(entry_errors))
    try:
        results = read_evidence(module.params["commands"], module.params["privilege"], module.params["timeout"])
    except EvidenceConfigError as exc:
        module.fail_json(msg=str(exc))
    module.exit_json(changed=False, results=results)


if __name__ == "__main__":
    main()
