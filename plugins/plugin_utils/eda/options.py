# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The options of sentinel.heal's event sources, validated as Ansible validates a module's (the specs mirror each
source's DOCUMENTATION)."""

from __future__ import annotations

from typing import Any, Mapping

from ansible.module_utils.common.arg_spec import ArgumentSpecValidator

from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.approvers import APPROVER_OPTIONS
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError

_FLEET = dict(
    inventory=dict(type="str", required=True),
    hosts=dict(type="str", default="all"),
)

WATCHDOG_OPTIONS = dict(
    _FLEET,
    services=dict(type="list", elements="str", default=[]),
    interval=dict(type="float", default=5.0),
    become=dict(type="bool", default=True),
    log_lines=dict(type="int", default=20),
    host_query=dict(type="str"),
    service_query=dict(type="str"),
)

ALERT_WEBHOOK_OPTIONS = dict(
    _FLEET,
    host=dict(type="str", default="127.0.0.1"),
    port=dict(type="int", default=5000),
    token=dict(type="str", no_log=True),
    host_labels=dict(type="list", elements="str", default=["host", "instance"]),
    service_labels=dict(type="list", elements="str", default=["service", "name"]),
    alerts_query=dict(type="str"),
    host_query=dict(type="str"),
    service_query=dict(type="str"),
)

APPROVAL_PAGE_OPTIONS = dict(
    inventory=dict(type="str", required=True),
    host=dict(type="str", default="127.0.0.1"),
    port=dict(type="int", default=5001),
    link_secret=dict(type="str", default="", no_log=True),
    approvers=dict(type="list", elements="dict", default=[], options=APPROVER_OPTIONS),
    slack_signing_secret=dict(type="str", default="", no_log=True),
)

# the shortest pause between two watchdog rounds: each round starts Ansible once on the controller
MIN_INTERVAL_S = 1.0


def source_options(source: str, spec: Mapping[str, Any], args: Mapping[str, Any]) -> dict[str, Any]:
    """The source's arguments from its rulebook, validated against ``spec`` and completed with the defaults."""
    result = ArgumentSpecValidator(dict(spec)).validate(dict(args))
    if result.error_messages:
        raise ConfigError(f"{source}: invalid arguments in the rulebook: {'; '.join(result.error_messages)}", field=source,
                          value=sorted(args), hint=f"see ansible-doc-style DOCUMENTATION in {source}.py, or docs/docsite/rst/eda.rst")
    options: dict[str, Any] = result.validated_parameters
    if "interval" in options and options["interval"] < MIN_INTERVAL_S:
        raise ConfigError(f"{source}: interval is shorter than a round can be", field="interval", value=options["interval"],
                          hint=f"give {MIN_INTERVAL_S:g} seconds or more")
    return options
