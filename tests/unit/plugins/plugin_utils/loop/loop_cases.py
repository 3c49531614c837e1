"""What the loop's tests share beyond tests/unit/plugins/plugin_utils/helpers.py: the audit trail as the timeline
callback writes it, the evidence service_check read ahead, and what changed since the last known good (nothing)."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path
from typing import Any, Mapping

import jsonschema

from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.audit import append_audit

AUDIT_SCHEMA = json.loads((Path(__file__).resolve().parents[5] / "docs" / "audit-schema.json").read_text())
AS_GOOD = {"good_at": 900.0, "files": [], "packages": []}


def audited(tmp_path: Path, incident: Mapping[str, Any]) -> list[dict[str, Any]]:
    """The records the timeline callback appends to the run's audit.jsonl for the incident, read back from the file and
    each held to docs/audit-schema.json."""
    audit = tmp_path / "audit.jsonl"
    audit.unlink(missing_ok=True)
    append_audit(incident["attempt_log"], audit)
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    for record in records:
        jsonschema.Draft202012Validator(AUDIT_SCHEMA).validate(record)
    return records


def read_ahead(failure: Failure, *answers: dict[str, Any]) -> Failure:
    """The failure as service_check reports it when it read the evidence commands itself (evidence_commands)."""
    return dataclasses.replace(failure, evidence=dict(failure.evidence, commands=list(answers)))
