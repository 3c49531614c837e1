"""The executor's requests.py, through the executor as the host runs it: a request that is not what its kind needs
is refused naming the field, and logged."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from host_executor import (
    check_request,
    execute,
)

from ansible_collections.sentinel.heal.plugins.module_utils._host.executor import REFUSED


@pytest.mark.parametrize(("raw", "field"), [
    (b"not json", "request"),
    (b"[1]", "request"),
    (json.dumps({"host": "node1"}).encode(), "service"),
    (json.dumps({"host": "node1", "service": "nginx", "policy_version": "x", "plan": [], "step": 0}).encode(), "plan"),
    (json.dumps({"host": "node1", "service": "nginx", "policy_version": "x", "plan": [["df"]], "step": 1}).encode(), "step"),
    (json.dumps({"host": "node1", "service": "nginx", "policy_version": "x", "plan": [["df"]], "step": 0, "timeout": 0}).encode(), "timeout"),
])
def test_a_malformed_request_is_refused_naming_the_field(host: Path, raw: bytes, field: str) -> None:
    rc, response, log = execute(host, raw)
    assert rc == REFUSED and response["rule"] == "request"
    assert f"field: {field}" in response["reason"]
    assert log[0]["decision"] == "refused"


@pytest.mark.parametrize("evidence", [
    [{"service": "nginx", "argv": "df -h /"}],
    [{"service": "redis", "argv": ["df"]}],
    [{"service": "nginx", "argv": []}],
    [{"service": "nginx", "argv": ["df"]}] * 17,
    {"nginx": ["df"]},
])
def test_evidence_a_check_cannot_read_is_refused_naming_the_field(host: Path, evidence: Any) -> None:
    rc, response, _log = execute(host, check_request(["nginx"], evidence=evidence))
    assert rc == REFUSED and response["rule"] == "request" and "field: evidence" in response["reason"], response
