"""The executor's host_context.py: the incident's context is what the executor reads on the host itself."""

from __future__ import annotations

import json
import os
import time
from pathlib import Path

from host_executor import (
    NGINX,
    for_the_failure_now,
    request,
)


def test_a_directory_is_given_back_what_the_host_saw_it_while_the_service_was_healthy_where_no_table_names_it(host: Path, tmp_path: Path) -> None:
    """The executor judges in a context of its own reading: what the service's directory was while the service was
    healthy (kept on the host) is what a repair may give back, and nothing else, with no entry of the policy's table."""
    from ansible_collections.sentinel.heal.plugins.module_utils._host import executor as _executor
    from ansible_collections.sentinel.heal.plugins.module_utils._host import owned_dirs as _owned_dirs
    cache = tmp_path / "srv" / "nginx-cache"
    cache.mkdir(parents=True)
    cache.chmod(0o750)
    os.chown(cache, 65534, 65534)
    (host / "services.json").write_text(json.dumps({"host": "node1", "services": [dict(NGINX, paths=[str(cache)])]}))
    _owned_dirs.record_seen("nginx", [str(cache)], os.stat(cache).st_ctime + 5, time.time())
    cache.chmod(0o777)  # then a chmod that went too far, and nginx failed
    approvals = str(host.parent / "approvals")
    wrong = _executor.handle(for_the_failure_now(host, request(["chmod", "0777", str(cache)])), str(host), approvals)
    assert wrong["refused"] and wrong["rule"] == "mode-repair-needs-a-person", wrong
    answer = _executor.handle(for_the_failure_now(host, request(["install", "-d", "-m", "0750", "-o", "nobody", "-g", "nogroup", str(cache)])),
                              str(host), approvals)
    assert (answer["rc"], answer["rule"]) == (0, "create-runtime-directory"), answer
    assert oct(cache.stat().st_mode & 0o7777) == "0o750"
