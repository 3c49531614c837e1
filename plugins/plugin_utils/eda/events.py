# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""What sentinel.heal's event sources put on an ansible-rulebook queue, and how an alert becomes one.

An alert (Prometheus Alertmanager's webhook payload, a plain JSON object naming a host and a service, or any other
monitor's body read through an AlertMapping of JMESPath expressions) becomes a request to heal exactly one declared
service on exactly one inventory host. Whatever else it carries (labels, annotations, text a monitored process
wrote) stays out of the event: rulebooks and playbooks only ever see names the inventory holds.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field, replace
from typing import Any, Iterable, Mapping

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.conditions import Query, compile_query
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.fleet import Fleet
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError

# the labels an Alertmanager alert names its host with, the first present wins (node_exporter's target is `instance`)
HOST_LABELS = ("host", "instance")
# ``name``: node_exporter's systemd collector names the unit so (``node_systemd_unit_state{name="nginx.service"}``)
SERVICE_LABELS = ("service", "name")
QUOTED_LIMIT = 80
PROMETHEUS_NAME = re.compile(r"^[A-Za-z_:][A-Za-z0-9_:]{0,79}$")
# Alertmanager's startsAt (RFC 3339): when the alert began firing, the same in every resend of it
STARTS_AT = re.compile(r"^\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(\.\d{1,9})?(Z|[+-]\d\d:\d\d)$")


@dataclass(frozen=True)
class HealRequest:
    """Heal this declared service on this inventory host; ``facts`` carry what the source saw (the watchdog's
    evidence), never an alert's own labels."""

    host: str
    service: str
    source: str
    reason: str
    facts: Mapping[str, Any] = field(default_factory=dict)
    # when the alert began firing ("" when the source does not say): the rulebook's throttle holds back resends of one
    # firing, never a new firing - a service that fails again after a heal is that heal's relapse, handled as one
    firing_since: str = ""

    def event(self) -> dict[str, Any]:
        """The event for ansible-rulebook: ``meta.hosts`` makes a run_playbook action's limit exactly the host."""
        return {"sentinel": {"host": self.host, "service": self.service, "source": self.source, "reason": self.reason,
                             "firing_since": self.firing_since, **self.facts}, "meta": {"hosts": self.host}}


@dataclass(frozen=True)
class AlertMapping:
    """How another monitor's webhook body names its alerts (``alerts``, over the body: a list, or one object) and each
    alert its host and its service (over one alert). Alertmanager's own, in these terms: ``alerts[?status ==
    'firing']``, ``labels.host || labels.instance``, ``labels.service``."""

    alerts: Query
    host: Query
    service: Query

    @classmethod
    def of(cls, alerts_query: str | None, host_query: str | None, service_query: str | None) -> AlertMapping | None:
        """The mapping the source's options give (compiled once, a bad expression refused with jmespath's words), or None
        for Alertmanager's payload and plain JSON."""
        if not (host_query or service_query):
            if alerts_query:
                raise ConfigError("alerts_query needs host_query and service_query", field="alerts_query", value=alerts_query,
                                  hint="give all three, or none for Alertmanager's payload and plain JSON")
            return None
        if not (host_query and service_query):
            given = "host_query" if host_query else "service_query"
            raise ConfigError("host_query and service_query go together", field=given, value=host_query or service_query,
                              hint="give both: each alert must name its host and its service")
        return cls(alerts=compile_query(alerts_query or "@", field="alerts_query"), host=compile_query(host_query, field="host_query"),
                   service=compile_query(service_query, field="service_query"))


@dataclass(frozen=True)
class EventMapping:
    """How the watchdog names the host and the service to heal for a service it saw failing: JMESPath over ``{host,
    service, failure_class, summary, checks, evidence}`` (the watched host and service and its check's result), by
    default the watched ones themselves (``host``, ``service``)."""

    host: Query
    service: Query

    @classmethod
    def of(cls, host_query: str | None, service_query: str | None) -> EventMapping:
        return cls(host=compile_query(host_query or "host", field="host_query"),
                   service=compile_query(service_query or "service", field="service_query"))


def read_alerts(payload: Any, fleet: Fleet, host_labels: Iterable[str] = HOST_LABELS, service_labels: Iterable[str] = SERVICE_LABELS,
                mapping: AlertMapping | None = None) -> tuple[list[HealRequest], list[str]]:
    """The heal requests in a webhook's JSON body, and why each of the rest was ignored.

    Alertmanager's payload (``{"alerts": [{"status": "firing", "labels": {...}}]}``) gives one request per firing
    alert; a plain object (``{"host": "web1", "service": "nginx"}``, or a list of them) one per object; with a
    ``mapping``, each alert its ``alerts`` expression finds. Only a host the inventory holds, named literally, with a
    service it declares, is accepted; duplicates in one body count once.
    """
    if mapping is not None:
        found = mapping.alerts.search(payload)
        items = [(alert, "mapped") for alert in (found if isinstance(found, list) else [] if found is None else [found])]
    elif isinstance(payload, Mapping) and isinstance(payload.get("alerts"), list):
        items = [(alert, "alertmanager") for alert in payload["alerts"]]
    elif isinstance(payload, list):
        items = [(item, "webhook") for item in payload]
    else:
        items = [(payload, "webhook")]
    accepted: dict[tuple[str, str], HealRequest] = {}
    ignored: list[str] = []
    for item, kind in items:
        request, why = _read_one(item, kind, fleet, tuple(host_labels), tuple(service_labels), mapping)
        if request is None:
            ignored.append(why)
        else:
            accepted.setdefault((request.host, request.service), request)
    return list(accepted.values()), ignored


def _read_one(item: Any, kind: str, fleet: Fleet, host_labels: tuple[str, ...], service_labels: tuple[str, ...],
              mapping: AlertMapping | None) -> tuple[HealRequest | None, str]:
    if not isinstance(item, Mapping):
        return None, f"not an object: {quoted(item)}"
    if mapping is not None:
        host, service, reason = mapping.host.search(item), mapping.service.search(item), "alert"
    elif kind == "alertmanager":
        labels: Mapping[str, Any] = item["labels"] if isinstance(item.get("labels"), Mapping) else {}
        if item.get("status", "firing") != "firing":
            return None, f"alert {quoted(labels.get('alertname'))} is {quoted(item.get('status'))}, not firing"
        host = next((labels[label] for label in host_labels if label in labels), None)
        service = next((labels[label] for label in service_labels if label in labels), None)
        alertname = labels.get("alertname")
        # an alert's name reaches the event only when it is a Prometheus name, never as free text
        reason = f"alert {alertname}" if isinstance(alertname, str) and PROMETHEUS_NAME.match(alertname) else "alert"
        starts_at = item.get("startsAt")
        request, why = heal_request(fleet, host, service, source=kind, reason=reason)
        if request is not None and isinstance(starts_at, str) and STARTS_AT.match(starts_at):
            request = replace(request, firing_since=starts_at)
        return request, why
    else:
        host, service, reason = item.get("host"), item.get("service"), "webhook"
    return heal_request(fleet, host, service, source=kind, reason=reason)


def heal_request(fleet: Fleet, host: Any, service: Any, *, source: str, reason: str,
                 facts: Mapping[str, Any] | None = None) -> tuple[HealRequest | None, str]:
    """The request to heal ``service`` on ``host`` when they name an inventory host and a service it declares, exactly
    (the service by its declared name or its unit's: ``redis-server.service`` is the declared ``redis`` whose
    ``service`` is redis-server); otherwise None and why (never a wider target: no pattern, no other host)."""
    if not isinstance(host, str) or not isinstance(service, str):
        return None, f"names no host and service (host {quoted(host)}, service {quoted(service)})"
    inventory_host = fleet.host_named(host)
    if inventory_host is None:
        return None, f"host {quoted(host)} is not an inventory host"
    declared = fleet.service_named(inventory_host, service)
    if declared is None:
        return None, f"service {quoted(service)} is not declared in autoheal_services of {inventory_host} (by its name or its unit's)"
    return HealRequest(host=inventory_host, service=declared, source=source, reason=reason, facts=facts or {}), ""


def quoted(value: Any) -> str:
    """A value from outside, fit for a log line: repr'd (control characters escaped) and clipped."""
    text = repr(value)
    return text if len(text) <= QUOTED_LIMIT else text[:QUOTED_LIMIT] + "..."
