"""The failure class of a failing service (module_utils/_host/failure_classes.py): the port's squatter, a service
nothing installed. The classes of stale pid files and sockets: test_runtime_files.py."""

from __future__ import annotations

from typing import Any

from local_llm import free_port
from probe_checks import check, declared

from ansible_collections.sentinel.heal.plugins.module_utils._host.processes import port_owners


def test_a_port_held_by_another_process_is_a_port_conflict_naming_the_squatter(web: dict[str, Any]) -> None:
    result = check(declared(name="webserver", ports=[web["port"]], process="no-such-webserver"))
    failure = result["failures"][0]
    assert failure["failure_class"] == "port_conflict"
    owner = failure["evidence"]["port_owners"][0]
    assert (owner["pid"], owner["process"], owner["port"]) == (web["pid"], web["comm"], web["port"])
    assert "http.server" in owner["cmdline"]
    assert port_owners(free_port()) == []


def test_a_status_check_of_an_unknown_service_fails_clearly() -> None:
    result = check(declared(name="ghost-service-xyz", status_check=True))
    assert "no init script or unit named ghost-service-xyz" in result["failures"][0]["summary"]
    assert result["failures"][0]["failure_class"] == "not_installed"
