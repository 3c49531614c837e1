# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Lookup sentinel.heal.host_policy: the policy document the host role installs for the executor on each host."""

from __future__ import annotations

DOCUMENTATION = r"""
name: host_policy
author:
  - Sentinel Heal Maintainers (@sentinel-heal)
short_description: The command policy as the executor on a host enforces it
description:
  - Reads the command policy the controller judges with (the shipped default, or a policy file) and returns it as the
    document the executor on each host loads from C(/etc/sentinel-heal/policy.json), that is the policy's data, the
    default's data under it when the file sets C(include_default), and the version the controller computed from them.
  - The executor refuses every request judged under another version, so the role that installs this document must be
    applied again whenever the controller's policy changes.
options:
  _terms:
    description: The policy file. Without one, the shipped default.
    required: false
    type: list
    elements: path
"""

EXAMPLES = r"""
- name: Install the policy the executor enforces
  ansible.builtin.copy:
    content: "{{ lookup('sentinel.heal.host_policy', autoheal_policy_file | default(omit)) | to_nice_json }}"
    dest: /etc/sentinel-heal/policy.json
    owner: root
    group: root
    mode: "0644"
"""

RETURN = r"""
_raw:
  description: One document with C(version), C(source) and C(layers) (the policy data, default first).
  type: list
  elements: dict
"""

from typing import Any

from ansible.errors import AnsibleLookupError
from ansible.plugins.lookup import LookupBase

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import SentinelError
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import host_policy_document


class LookupModule(LookupBase):
    def run(self, terms: list[Any], variables: dict[str, Any] | None = None, **kwargs: Any) -> list[Any]:
        if len(terms) > 1:
            raise AnsibleLookupError(f"give at most one policy file, not {len(terms)}: {terms!r}")
        try:
            return [host_policy_document(terms[0] if terms else None)]
        except SentinelError as exc:
            raise AnsibleLookupError(exc.describe()) from exc
