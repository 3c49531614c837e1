"""Signing a person's approval for the executor on the host (module_utils/_guard/approvals.py checks it there).

With enforcement on the host the controller's record that someone approved a plan is not enough: the approver's SSH
key signs the plan for the host it runs on, and the executor verifies the signature against the approvers the host
role listed. The key is the approver's (a private key file, or a public key whose private half ssh-agent holds).
"""

from __future__ import annotations

import shutil
import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Sequence

from ansible_collections.sentinel.heal.plugins.module_utils._guard.approvals import NAMESPACE, approval_message
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError

# long enough for the plan's steps and its verification, short enough that a signature is of no use later
DEFAULT_VALIDITY_S = 900


@dataclass(frozen=True)
class ApprovalSigner:
    """Signs approvals by ``approver`` with the SSH key at ``key``."""

    key: str
    approver: str
    validity: int = DEFAULT_VALIDITY_S

    @classmethod
    def from_options(cls, key: str, approver: str) -> ApprovalSigner:
        path = Path(key).expanduser()
        if not path.is_file():
            raise ConfigError("the approval key is not a file", field="approval_key", value=key,
                              hint="the approver's SSH key: a private key, or a public key whose private half ssh-agent holds")
        if not approver or any(not (c.isalnum() or c in "-_.@") for c in approver):
            raise ConfigError("with an approval key the approver is a name the host lists (letters, digits, - _ . @)",
                              field="approved_by", value=approver, hint="use the name host_approvers gives the key")
        signer = cls(key=str(path), approver=approver)
        signer.sign("", "", (), nonce="trial", now=0)  # a key that cannot sign fails here, before any plan is claimed
        return signer

    def sign(self, host: str, service: str, plan: Sequence[Sequence[str]], nonce: str, now: float) -> dict[str, Any]:
        """The approval the executor's request carries for this plan on ``host``."""
        expires = int(now) + self.validity
        keygen = shutil.which("ssh-keygen")
        if keygen is None:
            raise ConfigError("ssh-keygen is not installed on the controller", field="approval_key", value=self.key,
                              hint="install openssh-client")
        try:
            completed = subprocess.run([keygen, "-Y", "sign", "-q", "-f", self.key, "-n", NAMESPACE],
                                       input=approval_message(host, service, plan, nonce, expires), capture_output=True, check=False, timeout=60)
        except subprocess.TimeoutExpired:
            raise ConfigError("ssh-keygen did not sign the approval within 60 seconds", field="approval_key", value=self.key,
                              hint="does ssh-agent wait for a confirmation?") from None
        if completed.returncode != 0 or b"BEGIN SSH SIGNATURE" not in completed.stdout:
            raise ConfigError("ssh-keygen could not sign the approval", field="approval_key", value=self.key,
                              hint=completed.stderr.decode("utf-8", "replace").strip() or "is the key's passphrase in ssh-agent?")
        return dict(by=self.approver, nonce=nonce, expires=expires, signature=completed.stdout.decode("ascii"))
