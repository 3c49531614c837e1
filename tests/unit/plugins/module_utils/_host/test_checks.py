"""The checks a service declares (module_utils/_host/checks.py) against a real HTTP server, commands and this machine's
service manager."""

from __future__ import annotations

import sys
from typing import Any

from probe_checks import check, declared


def test_a_healthy_service_passes_every_kind_of_check(web: dict[str, Any]) -> None:
    pidfile = web["dir"] / "web.pid"
    pidfile.write_text(f"{web['pid']}\n")
    result = check(declared(
        ports=[web["port"]], process=web["comm"], pidfile=str(pidfile),
        http={"url": f"http://127.0.0.1:{web['port']}/index.html", "status": 200, "body": "hello from"},
        check_command=f"{sys.executable} -c 'print(\"all systems go\")'", running_indicator="systems go",
    ))
    assert result["healthy"] and result["failures"] == []
    assert [c["kind"] for c in result["services"][0]["checks"]] == ["port", "http", "process", "command"]
    assert result["facts"]["service_manager"] in ("systemd", "sysv", "unknown")


def test_http_status_and_body_mismatches_fail_with_the_reason(web: dict[str, Any]) -> None:
    base = f"http://127.0.0.1:{web['port']}"
    result = check(
        declared(name="missing", http={"url": f"{base}/nope.html", "status": 200, "body": None}),
        declared(name="body", http={"url": f"{base}/index.html", "status": 200, "body": "^goodbye"}),
    )
    details = {f["name"]: f["summary"] for f in result["failures"]}
    assert "status 404 (expected 200)" in details["missing"]
    assert "does not match" in details["body"]
    assert {f["failure_class"] for f in result["failures"]} == {"unhealthy"}


def test_check_command_and_running_indicator() -> None:
    result = check(
        declared(name="says-no", check_command=f"{sys.executable} -c 'print(\"stopped\")'", running_indicator="running"),
        declared(name="exits-1", check_command=f"{sys.executable} -c 'raise SystemExit(1)'"),
        declared(name="absent", check_command="/nonexistent/binary"),
    )
    summaries = {f["name"]: f["summary"] for f in result["failures"]}
    assert "lacks 'running'" in summaries["says-no"]
    assert "rc=1" in summaries["exits-1"]
    assert "cannot run /nonexistent/binary" in summaries["absent"]
