# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ansible-rulebook event source sentinel.heal.alert_webhook: alerts naming a host and a service, checked against the
inventory at the door."""

from __future__ import annotations

import asyncio
import hmac
import json
import logging
import sys
import time
from pathlib import Path
from typing import Any

from aiohttp import web

DOCUMENTATION = r"""
---
short_description: Receive alerts (Prometheus Alertmanager's webhook, or plain JSON) that name a host and a service
description:
  - An HTTP server; every C(POST) (any path) carries JSON - Alertmanager's webhook payload (C(alerts), each with its
    C(labels)), or a plain object C({"host": "web1", "service": "nginx"}), or a list of such objects.
  - Each firing alert, or object, that names an inventory host (its inventory name, or its C(ansible_host) address,
    with or without a port as Prometheus' C(instance) label has it) and a service that host declares in
    C(autoheal_services) (by its name, or by its unit's, with or without C(.service) - C(redis-server.service) for the
    service C(redis) whose C(service) is C(redis-server)), becomes one event for the declared service; the same host
    and service twice in one body, one event.
  - Everything else (a host outside the inventory, a group name or a pattern, an undeclared service, a resolved alert)
    is logged and ignored - never widened to more hosts. Labels and annotations stay out of the event, so text from
    outside never reaches a rulebook's variables or a playbook.
  - The event is C(sentinel) (C(host), C(service), C(source) (C(alertmanager), C(webhook), or C(mapped) through O(host_query)), C(reason),
    C(firing_since) - an Alertmanager alert's C(startsAt), the same in each resend of one firing, else empty - for the
    rulebook's throttle to hold back resends and let a new firing through) and C(meta.hosts), the one host, so that a
    C(run_playbook) action is limited to it.
  - Alerts about one service on many hosts at once are one fleet incident, not one heal job per host - every accepted
    alert is written to the memory the heal jobs share (the inventory's C(autoheal_state_dir) or C(autoheal_memory_url);
    a PostgreSQL memory logs in with the URL's password, C(PGPASSWORD) or C(~/.pgpass)); once the alerts about a service
    name C(autoheal_fleet_min_hosts) hosts within C(autoheal_fleet_window) seconds (the inventory's, as the jobs read
    them; 5 and 600 by default), one fleet event C(sentinel) (C(hosts), C(service), C(source), C(reason)) with
    C(meta.hosts) naming all of them goes on the queue, and further alerts about that service are absorbed (logged, no
    event) until the window ends - also across a restart of the rulebook, since the throttle is the memory's.
  - Answers 202 with C(status) C(accepted), the accepted requests, the fleet events (C(fleet)), what was absorbed and
    why the rest were ignored; 200 with C(status)
    C(ignored) and why, when the body heals nothing; 400 for a body that is not JSON (logged with the sender's address
    and the reason), 401 without the O(token).
  - The inventory is read once, at start; restart the rulebook after changing it.
options:
  inventory:
    description: Path of the inventory (the one given to C(ansible-rulebook -i) too).
    type: str
    required: true
  hosts:
    description: A host pattern of the inventory; only the hosts it matches can be named by an alert.
    type: str
    default: all
  host:
    description: Address to listen on.
    type: str
    default: 127.0.0.1
  port:
    description: TCP port to listen on.
    type: int
    default: 5000
  token:
    description: When set, requests must carry C(Authorization) C(Bearer) and this token (Alertmanager's
      C(http_config.authorization.credentials)).
    type: str
  host_labels:
    description: The labels of an Alertmanager alert that name its host, the first present wins.
    type: list
    elements: str
    default: [host, instance]
  service_labels:
    description:
      - The labels of an Alertmanager alert that name its service, the first present wins.
      - C(name) is the unit's label in node_exporter's systemd collector (C(node_systemd_unit_state)).
    type: list
    elements: str
    default: [service, name]
  alerts_query:
    description:
      - For another monitor's webhook - a JMESPath expression over the body that gives its alerts (a list, or one
        object), for example C(alerts[?status == 'firing']) (Grafana) or C([@][?heartbeat.status == `0`]) (Uptime Kuma).
      - Defaults to the body itself. Needs O(host_query) and O(service_query).
    type: str
  host_query:
    description:
      - A JMESPath expression over one alert that gives its host, for example C(labels.host) or C(monitor.hostname).
      - The result must name an inventory host exactly (or its C(ansible_host) address); anything else is ignored.
      - With O(service_query), it replaces O(host_labels) and O(service_labels) (Alertmanager's mapping is
        C(labels.host || labels.instance) and C(labels.service)). See docs/docsite/rst/eda.rst for Zabbix, Grafana and Uptime Kuma.
    type: str
  service_query:
    description:
      - A JMESPath expression over one alert that gives its service, for example C(labels.service) or
        C(monitor.tags[?name == 'service'].value | [0]); it must be one the host declares in C(autoheal_services).
    type: str
"""

EXAMPLES = r"""
- name: Heal what Alertmanager reports
  hosts: all
  sources:
    - sentinel.heal.alert_webhook:
        inventory: inventory/
        host: 0.0.0.0
        port: 5000
        token: "{{ alert_token }}"
  rules:
    - name: Heal the alerted service
      condition: event.sentinel.host is defined
      action:
        run_playbook:
          name: sentinel.heal.heal
          extra_vars:
            autoheal_target: "{{ event.sentinel.host }}"
            autoheal_target_services: ["{{ event.sentinel.service }}"]
"""

# ansible-rulebook runs a source from its file (runpy), outside Ansible's collection loader: the directory that holds
# ansible_collections/ (this file is ansible_collections/sentinel/heal/extensions/eda/plugins/event_source/) makes
# the collection's controller code importable.
sys.path.append(str(Path(__file__).parents[7]))

from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.events import AlertMapping, read_alerts  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.fleet import Fleet, read_fleet  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.options import ALERT_WEBHOOK_OPTIONS, source_options  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.throttle import admit, fleet_settings  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import FleetSettings  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory  # noqa: E402

logger = logging.getLogger("sentinel.heal.alert_webhook")
# Alertmanager groups alerts into one body; a body this large is no alert
MAX_BODY_BYTES = 1024 * 1024


async def main(queue: asyncio.Queue[Any], args: dict[str, Any]) -> None:
    options = source_options("alert_webhook", ALERT_WEBHOOK_OPTIONS, args)
    fleet = read_fleet(options["inventory"], options["hosts"])
    mapping = AlertMapping.of(options["alerts_query"], options["host_query"], options["service_query"])
    settings = fleet_settings(fleet)
    memory = Memory.from_options(fleet.memory_options())

    async def receive(request: web.Request) -> web.Response:
        if options["token"] and not hmac.compare_digest(request.headers.get("Authorization", ""), f"Bearer {options['token']}"):
            logger.warning("refused a request from %s: no valid bearer token", request.remote)
            return web.json_response({"error": "a bearer token is required"}, status=401)
        try:
            payload = json.loads(await request.read())
        except (ValueError, UnicodeDecodeError) as exc:
            logger.warning("refused a body from %s: it is not JSON (%s)", request.remote, exc)
            return web.json_response({"error": f"the body is not JSON: {exc}"}, status=400)
        answer = await _enqueue(queue, payload, fleet, options, mapping, memory, settings)
        return web.json_response(answer, status=202 if answer["status"] == "accepted" else 200)

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_post("/{path:.*}", receive)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, options["host"], options["port"]).start()
        logger.info("listening on %s:%d for %d hosts", options["host"], options["port"], len(fleet.services))
        await asyncio.Future()  # until ansible-rulebook stops the source
    finally:
        await runner.cleanup()
        memory.close()


async def _enqueue(queue: asyncio.Queue[Any], payload: Any, fleet: Fleet, options: dict[str, Any],
                   mapping: AlertMapping | None, memory: Memory, settings: FleetSettings) -> dict[str, Any]:
    requests, ignored = read_alerts(payload, fleet, options["host_labels"], options["service_labels"], mapping)
    for why in ignored:
        logger.warning("ignored an alert: %s", why)
    admitted = admit(requests, memory, settings, at=time.time()) if requests else None
    for event in admitted.events if admitted else []:
        await queue.put(event)
    for request in admitted.fleets if admitted else []:
        logger.warning("one fleet job for %s on %s: %s", request.service, ", ".join(request.hosts), request.reason)
    for line in admitted.absorbed if admitted else []:
        logger.warning("no job: %s", line)
    return {"status": "accepted" if requests else "ignored",
            "accepted": [{"host": request.host, "service": request.service} for request in requests], "ignored": ignored,
            "fleet": [{"hosts": list(request.hosts), "service": request.service} for request in admitted.fleets] if admitted else [],
            "absorbed": admitted.absorbed if admitted else []}
