"""What the tasks that tell people (heal, execute, approval) say of their messages in their results: a message not
delivered is a warning on the incident it was about, or of the task when it was about none of the task's incidents (a
fleet incident's, a denial's); every message is in the result's ``notifications`` (the timeline callback's audit
trail writes a ``notification`` record of each)."""

from __future__ import annotations

from typing import Any, Sequence

from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import IncidentOutcome
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.messages import incident_key
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.sending import Delivery


def warn_on_incidents(outcomes: Sequence[IncidentOutcome], deliveries: Sequence[Delivery]) -> list[str]:
    """Each delivery that failed, a warning on the incident it was about (before the task's result is made of the
    outcomes); the warnings of the others, returned, are the task's own."""
    by_incident = {incident_key(o.state.failure.host, o.state.failure.service, o.state.failure.fingerprint): o for o in outcomes}
    of_the_task = []
    for delivery in deliveries:
        if delivery.delivered:
            continue
        if delivery.key in by_incident:
            by_incident[delivery.key].state.warnings.append(delivery.describe())
        else:
            of_the_task.append(delivery.describe())
    return of_the_task


def with_notifications(result: dict[str, Any], deliveries: Sequence[Delivery], warnings: Sequence[str] = ()) -> dict[str, Any]:
    """The task's result with its messages and, among its warnings, those of the messages about none of its incidents."""
    if deliveries:
        result["notifications"] = [delivery.to_dict() for delivery in deliveries]
        result["warnings"] = [*result.get("warnings", []), *warnings]
    return result
