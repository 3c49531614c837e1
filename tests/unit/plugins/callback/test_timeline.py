"""The timeline callback's audit trail: a notification record for each message a task that tells people sent, the
denial's too (sentinel.heal.approval, which has no incident of its own to show in the timeline)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace

import yaml
from ansible import constants as C

from ansible_collections.sentinel.heal.plugins.callback import timeline as timeline_plugin

SENT = {"destination": "ops chat", "type": "slack", "event": "denied", "key": "sentinel.heal/web1/nginx/abc", "incident_id": "i-1",
        "delivered": False, "tries": 3, "error": "HTTP 503 Service Unavailable", "skipped": False}


def _loaded(audit_file: Path) -> timeline_plugin.CallbackModule:
    """The callback with its options, as Ansible's plugin loader sets it up from its documentation."""
    name = "sentinel.heal.timeline"
    C.config.initialize_plugin_configuration_definitions("callback", name, yaml.safe_load(timeline_plugin.DOCUMENTATION)["options"])
    callback = timeline_plugin.CallbackModule()
    callback._load_name = name
    callback.set_options(direct={"audit_file": str(audit_file)})
    return callback


def _result(action: str, host: str, data: dict[str, object]) -> SimpleNamespace:
    return SimpleNamespace(task=SimpleNamespace(resolved_action=action), host=SimpleNamespace(get_name=lambda: host), result=data)


def test_a_denials_messages_are_notification_records_of_the_audit_trail(tmp_path: Path) -> None:
    audit = tmp_path / "audit.jsonl"
    timeline = _loaded(audit)
    timeline.v2_runner_on_ok(_result("sentinel.heal.approval", "localhost", {"changed": True, "plan": {}, "notifications": [SENT]}))
    timeline.v2_runner_on_ok(_result("ansible.builtin.debug", "localhost", {"notifications": [SENT]}))
    [record] = [json.loads(line) for line in audit.read_text().splitlines()]
    assert (record["kind"], record["incident_id"], record["detail"]) == ("notification", "i-1", {key: SENT[key] for key in (
        "destination", "type", "event", "key", "delivered", "tries", "error", "skipped")})
    assert timeline._hosts == {}  # nothing of it in the timeline of incidents
