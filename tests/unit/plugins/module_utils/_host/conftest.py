"""The executor tests' fixtures: the host's configuration as the host role writes it, and a person who approves."""

from __future__ import annotations

import json
import subprocess
from pathlib import Path

import pytest
from host_executor import NGINX

from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.host_approval import ApprovalSigner
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import host_policy_document


@pytest.fixture
def host(tmp_path: Path, empty_host: Path) -> Path:
    """The configuration the host role writes: the controller's policy document and the declared services; the empty
    host has nginx's init script, which says it is stopped (so nginx is not_running there, whatever runs on this machine)."""
    script = empty_host / "etc" / "init.d" / "nginx"
    script.write_text("#!/bin/sh\nexit 3\n")
    script.chmod(0o755)
    config = tmp_path / "etc"
    config.mkdir()
    (config / "policy.json").write_text(json.dumps(host_policy_document()))
    (config / "services.json").write_text(json.dumps({"host": "node1", "services": [NGINX], "probe_hosts": ["node1"]}))
    return config


@pytest.fixture
def approver(host: Path, tmp_path: Path) -> ApprovalSigner:
    """Alice's SSH key (hers, not the controller's), listed on the host as the role writes host_approvers."""
    key = tmp_path / "alice" / "id_ed25519"
    key.parent.mkdir()
    subprocess.run(["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-C", "alice", "-f", str(key)], check=True)
    (host / "approvers").write_text(f'alice namespaces="sentinel-heal-approval" {key.with_suffix(".pub").read_text()}')
    return ApprovalSigner.from_options(str(key), "alice")
