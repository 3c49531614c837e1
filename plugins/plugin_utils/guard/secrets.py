"""The secrets a play knows, so they can be masked in everything sentinel.heal keeps or shows.

Host output (evidence, step output) passes through :func:`redact` on the controller before it
reaches memory, reports or the job's output: the literal values gathered here (vault-encrypted
variables, connection and privilege escalation passwords, variables named like secrets, the LLM
API key, values the user lists) and the patterns of ``module_utils._guard.redact``. The values never
travel to the targets.
"""

from __future__ import annotations

import os
import re
from typing import Any, Iterable, Iterator, Mapping

from ansible_collections.sentinel.heal.plugins.module_utils._guard.redact import redact_tree

# ..._pass: the inventory's short names for connection and privilege escalation passwords (ansible_ssh_pass, ansible_become_pass)
SECRET_NAME = re.compile(r"(password|passwd|passphrase|secret|token|api_?key|private_?key|credential|(?:^|_)pass$)", re.IGNORECASE)
SECRET_ENVIRONMENT = ("OPENAI_API_KEY", "AZURE_OPENAI_API_KEY")
MINIMUM_LENGTH = 4
_MAX_DEPTH = 4
# Magic and bulky variables that hold no secret of their own (hostvars holds every host's variables).
_SKIPPED = frozenset({"hostvars", "groups", "group_names", "vars", "omit", "ansible_facts", "play_hosts", "ansible_play_hosts",
                      "ansible_play_hosts_all", "ansible_play_batch", "inventory_dir", "playbook_dir", "role_path"})

try:  # ansible-core 2.19 and later
    from ansible.parsing.vault import VaultHelper

    def _vaulted(value: Any) -> bool:
        return VaultHelper.get_ciphertext(value, with_tags=False) is not None
except ImportError:  # ansible-core 2.18
    from ansible.parsing.yaml.objects import AnsibleVaultEncryptedUnicode

    def _vaulted(value: Any) -> bool:
        return isinstance(value, AnsibleVaultEncryptedUnicode)


def known_secrets(task_vars: Mapping[str, Any], extra: Iterable[str] = ()) -> list[str]:
    """Literal secret values of this host's variables, longest first."""
    found = {str(value) for value in extra if value}
    found |= {os.environ[name] for name in SECRET_ENVIRONMENT if os.environ.get(name)}
    for name, value in task_vars.items():
        if name in _SKIPPED:
            continue
        found |= set(_secret_values(name, value, depth=0))
    return sorted((value for value in found if len(value) >= MINIMUM_LENGTH and "{{" not in value), key=len, reverse=True)


def _secret_values(name: str, value: Any, depth: int) -> Iterator[str]:
    if depth > _MAX_DEPTH:
        return
    if _vaulted(value):
        try:
            yield str(value)
        except Exception:  # noqa: BLE001 - a value that cannot be decrypted cannot leak either
            return
        return
    if isinstance(value, str):
        if SECRET_NAME.search(name):
            yield value
    elif isinstance(value, Mapping):
        for key, item in value.items():
            yield from _secret_values(str(key), item, depth + 1)
    elif isinstance(value, (list, tuple)):
        for item in value:
            yield from _secret_values(name, item, depth + 1)


def redact(value: Any, secrets: Iterable[str]) -> Any:
    """Mask the known secrets and the secret patterns in every string of a result."""
    return redact_tree(value, tuple(secrets))
