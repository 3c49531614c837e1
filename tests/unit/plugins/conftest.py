"""What the guard's tests on both sides share (module_utils/_guard/ judges, plugin_utils/guard/ splits commands and loads
policy files): the nginx incident they judge commands in, and a policy file a test writes."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from ansible_collections.sentinel.heal.plugins.module_utils._guard.context import PolicyContext


@pytest.fixture
def nginx_context() -> PolicyContext:
    """nginx down with a stale pid file, python3 on a port, tini as pid 1 and sshd on another."""
    return PolicyContext(
        service="nginx",
        init_service="nginx",
        process="nginx",
        port_owners={4242: "python3", 1: "tini", 77: "sshd"},
        stale_pidfile="/run/nginx.pid",
        log_files=("/var/log/nginx/error.log",),
        service_dirs=("/var/log/nginx", "/run/nginx"),
        log_dirs=("/var/log/nginx",),
        # service_check looks at each declared log: a file, not a link
        path_owners={"/var/log/nginx/error.log": "www-data"},
    )


@pytest.fixture
def write_policy(tmp_path: Path) -> Callable[[str], Path]:
    """Writes the text as the policy file policy.yml in the test's tmp_path, and gives its path."""
    def write(text: str) -> Path:
        path = tmp_path / "policy.yml"
        path.write_text(text)
        return path
    return write
