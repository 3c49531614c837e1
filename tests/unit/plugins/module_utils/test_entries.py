"""Errors in a list option said where they are: the option, the entry's index and name, the field and the value."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.module_utils._entries import checked_spec, entry_errors
from ansible_collections.sentinel.heal.plugins.module_utils._host.probe import ARGUMENT_SPEC, SERVICE_OPTIONS
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.options import HEAL_SPEC, list_option_errors_of_task

TWELVE = [{"name": f"svc{index}", "ports": [8000 + index]} for index in range(12)]


def test_a_wrong_value_in_the_services_list_names_the_option_the_entry_the_field_and_the_value() -> None:
    services = [*TWELVE[:7], {"name": "web", "ports": ["eighty"]}, *TWELVE[7:]]
    [error] = entry_errors("services", services, SERVICE_OPTIONS)
    assert error.startswith("services[7] (web): ports: ['eighty']: ")
    assert "eighty" in error and "int" in error


def test_each_kind_of_error_names_its_entry() -> None:
    services = [{"name": "db", "mode": "sometimes"}, {"ports": [5432]}, {"name": "cache", "prots": [6379]}, "redis",
                {"name": "web", "http": {"status": 200}}]
    errors = entry_errors("autoheal_services", services, SERVICE_OPTIONS)
    assert errors[0].startswith("autoheal_services[0] (db): mode: 'sometimes': ") and "observe, review, autonomous" in errors[0]
    assert errors[1] == "autoheal_services[1]: name is required"
    assert errors[2].startswith("autoheal_services[2] (cache): prots is not an option of autoheal_services (its options: ")
    assert errors[3] == "autoheal_services[3]: each entry must be a dictionary, got 'redis'"
    assert errors[4].startswith("autoheal_services[4] (web): http: {'status': 200}: ") and "url" in errors[4]
    assert len(errors) == 5
    assert entry_errors("services", TWELVE, SERVICE_OPTIONS) == []


def test_in_the_role_the_error_names_the_roles_variable_and_elsewhere_the_tasks_option() -> None:
    args = {"services": [{"name": "web", "ports": ["eighty"]}], "state_dir": "/tmp/x"}
    [in_role] = list_option_errors_of_task(HEAL_SPEC, args, "sentinel.heal.autoheal")
    assert in_role.startswith("autoheal_services[0] (web): ports: ")
    [in_task] = list_option_errors_of_task(HEAL_SPEC, args, None)
    assert in_task.startswith("services[0] (web): ports: ")


def test_a_module_with_errors_in_its_list_options_starts_without_their_entry_specs_to_say_where_they_are() -> None:
    spec, errors = checked_spec(ARGUMENT_SPEC, {"services": [{"name": "web", "ports": ["eighty"]}]})
    assert errors and "options" not in spec["services"] and spec["log_lines"] == ARGUMENT_SPEC["log_lines"]
    assert checked_spec(ARGUMENT_SPEC, {"services": TWELVE}) == (ARGUMENT_SPEC, [])
    assert checked_spec(ARGUMENT_SPEC, None) == (ARGUMENT_SPEC, [])  # what ansible-test's fake _load_params returns
