#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations

DOCUMENTATION = r"""
---
module: known_good_restore
short_description: Put back the last known good version of a service's configuration file, kept on the host
version_added: 0.2.0
description:
  - While every check of a service passes, M(sentinel.heal.service_check) keeps the last known good copy of its
    configuration on the host (in C(/var/lib/sentinel-heal/known-good/SERVICE), root only). This puts one file back,
    as the heal loop's step C(sentinel-heal-restore PATH SHA256) does on a host without the executor of the role
    C(sentinel.heal.host).
  - The copy kept for O(path) must still be the one of hash O(sha256) (the one whose diff a person approved);
    otherwise nothing changes and the task fails.
  - The current version is kept aside first, byte for byte, in C(/var/lib/sentinel-heal/known-good/SERVICE/aside/TIME/PATH)
    (returned as RV(aside)) - a person's edit is never lost. The good version then replaces the file at once, with the
    file's owner and mode, never through a link; where the good version was a link (C(sites-enabled/000-default.conf),
    replaced by an edited copy), the link is put back, once the file it leads to is still that good copy. Then the
    service's configuration test (O(config_test)) runs; when it fails, the current version is put back and the task
    fails.
  - Needs root (C(become)). Runs with the standard library of the target's Python only.
author:
  - Sentinel Heal Maintainers (@sentinel-heal)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
attributes:
  check_mode:
    support: full
    details: Checks that the copy of that hash is kept and changes nothing.
  diff_mode:
    support: none
    details: The diff is shown before approval, from the controller's record; file contents never leave the host here.
  platform:
    support: full
    platforms: posix
options:
  service:
    description: The name the service is declared under (whose known-good directory holds the copy).
    type: str
    required: true
  path:
    description: The file to put back, as the host's record of what changed names it.
    type: path
    required: true
  sha256:
    description: The SHA-256 of the kept copy to put back (C(good_sha256) in the evidence's C(changes)).
    type: str
    required: true
  config_test:
    description:
      - The service's configuration test, an argv run without a shell. V([]) runs none.
      - Unset, the known test of the service (C(nginx -t), C(apache2ctl configtest), C(sshd -t),
        C(haproxy -c -f /etc/haproxy/haproxy.cfg), C(named-checkconf), C(unbound-checkconf)), or none.
    type: list
    elements: str
seealso:
  - module: sentinel.heal.service_check
  - module: sentinel.heal.heal
"""

EXAMPLES = r"""
- name: Put back nginx's site as it was at the last healthy check (the hash from the escalation's evidence)
  sentinel.heal.known_good_restore:
    service: nginx
    path: /etc/nginx/sites-available/default
    sha256: 4f2c1bd6a3d9a8e1c6b0f1e2d3c4b5a69788796a5b4c3d2e1f0a9b8c7d6e5f40
  become: true
  register: restored

- name: Say where the broken version was kept
  ansible.builtin.debug:
    msg: "the edit is kept in {{ restored.aside }}"
"""

RETURN = r"""
restored:
  description: Whether the last known good version is in place (false in check mode).
  returned: always
  type: bool
aside:
  description: Where the version replaced was kept, byte for byte (root only).
  returned: when it was kept aside
  type: str
  sample: /var/lib/sentinel-heal/known-good/nginx/aside/20261128T101500Z/etc/nginx/sites-available/default
link:
  description: What the link put back in place of the file says, where the good version was a link.
  returned: when a link was put back
  type: str
  sample: ../sites-available/000-default.conf
test:
  description: The configuration test that ran - its C(argv), C(rc) and C(output) (redacted) - or null.
  returned: when not in check mode
  type: dict
rc:
  description: 0 when the good version is back, 1 otherwise - as the executor's step answers.
  returned: when not in check mode
  type: int
stdout:
  description: RV(restored), RV(aside), RV(test) and RV(link) as JSON, as the heal loop's step reads them.
  returned: when not in check mode
  type: str
stderr:
  description: Why the good version was not put back.
  returned: when not in check mode
  type: str
"""

import json

from ansible.module_utils.basic import AnsibleModule

from ansible_collections.sentinel.heal.plugins.module_utils._configuration_tests import configuration_test
from ansible_collections.sentinel.heal.plugins.module_utils._host.known_good import (
    KnownGoodError,
    good_copy,
    restore_step,
)

ARGUMENT_SPEC = dict(
    service=dict(type="str", required=True),
    path=dict(type="path", required=True),
    sha256=dict(type="str", required=True),
    config_test=dict(type="list", elements="str"),
)


def main():
    module = AnsibleModule(argument_spec=ARGUMENT_SPEC, supports_check_mode=True)
    service, path, sha256 = module.params["service"], module.params["path"], module.params["sha256"]
    if module.check_mode:
        try:
            good_copy(service, path, sha256)
        except (KnownGoodError, OSError) as exc:
            module.fail_json(msg="sha256: %s" % exc, restored=False)
        module.exit_json(changed=True, restored=False)
    test = module.params["config_test"]
    answer = restore_step(service, path, sha256, configuration_test({"name": service}) if test is None else test)
    done = json.loads(answer["stdout"]) if answer["stdout"] else dict(restored=False)
    if answer["rc"] != 0:
        module.fail_json(msg=answer["stderr"], changed=bool(done.get("aside")), **dict(done, **answer))
    module.exit_json(changed=True, **dict(done, **answer))


if __name__ == "__main__":
    main()
