"""What the probe refuses of a declaration before any check (module_utils/_host/declaration.py), each refusal naming
the field and its value."""

from __future__ import annotations

import re
from typing import Any

import pytest
from local_llm import free_port
from probe_checks import check, declared

from ansible_collections.sentinel.heal.plugins.module_utils._host.probe import ProbeConfigError


@pytest.mark.parametrize(
    ("spec", "message"),
    [
        (declared(name="bad name"), "services[0].name: 'bad name'"),
        (declared(ports=[70000]), "services[0].ports: 70000"),
        (declared(ports=[80], running_indicator="up"), "services[0].running_indicator: needs check_command"),
        (declared(http={"url": "ftp://x", "status": 200, "body": None}), "services[0].http.url: 'ftp://x'"),
        (declared(check_command="echo 'unbalanced"), "services[0].check_command"),
        (declared(), "declares no check"),
        (declared(ports=[80], timeout=0), "services[0].timeout: 0"),
    ],
)
def test_bad_declarations_name_the_field_and_value(spec: dict[str, Any], message: str) -> None:
    with pytest.raises(ProbeConfigError, match=re.escape(message)):
        check(spec)


def test_duplicate_names_are_refused() -> None:
    with pytest.raises(ProbeConfigError, match=r"services\[1\].name: 'a' is declared twice"):
        check(declared(name="a", ports=[1]), declared(name="a", ports=[2]))


@pytest.mark.parametrize(("commands", "timeout", "message"), [
    ([{"service": "nobody", "argv": ["true"], "become": False}], 120, "evidence_commands[0].service: 'nobody' is not one of the declared services"),
    ([{"service": "svc", "argv": [], "become": False}], 120, "evidence_commands[0].argv: an empty command"),
    ([], 0, "evidence_timeout: 0 is out of range (1-3600)"),
])
def test_evidence_commands_that_cannot_run_are_refused_before_any_check(commands: list[dict[str, Any]], timeout: int, message: str) -> None:
    with pytest.raises(ProbeConfigError, match=re.escape(message)):
        check(declared(name="svc", ports=[free_port()]), evidence_commands=commands, evidence_timeout=timeout)
