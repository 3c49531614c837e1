# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ansible-rulebook event source sentinel.heal.watchdog: the declared services checked on an interval."""

from __future__ import annotations

import asyncio
import logging
import sys
import time
from pathlib import Path
from typing import Any

DOCUMENTATION = r"""
---
short_description: Check the inventory's declared services on an interval; one event when a service starts failing
description:
  - Runs M(sentinel.heal.service_check) (the check, evidence and redaction a heal starts from) on the inventory's hosts
    every O(interval) seconds, over the inventory's own connections (one ad-hoc C(ansible) run per round), with each
    host's C(autoheal_services) declarations.
  - Emits one event when a service goes from healthy to failing, and none while it stays failing. A service already
    failing at the first round counts as going from healthy to failing, so what is broken when the watch starts is
    healed too. A host that cannot be checked (unreachable) keeps the state it had, and is logged.
  - The event is C(sentinel) (C(host), C(service), C(source=watchdog), C(reason=failing), and the service's
    C(failure_class), C(summary), C(checks) and C(evidence) as service_check returned them) and C(meta.hosts), the one
    host, so that a C(run_playbook) action is limited to it.
  - A service that starts failing on many hosts at once is one fleet incident, not one heal job per host - as for
    C(sentinel.heal.alert_webhook) (its documentation says how), one fleet event with C(hosts) and C(meta.hosts) naming
    all of them, and nothing more about the service until the window ends (the throttle is in the memory the heal
    jobs share).
  - The inventory is read once, at start; restart the rulebook after changing it.
  - Stops cleanly when ansible-rulebook shuts down (a round's C(ansible) run is killed and waited for).
options:
  inventory:
    description: Path of the inventory (the one given to C(ansible-rulebook -i) too).
    type: str
    required: true
  hosts:
    description: A host pattern of the inventory; the hosts it matches that declare a watched service are checked.
    type: str
    default: all
  services:
    description: Names of C(autoheal_services) to watch; empty, every declared service.
    type: list
    elements: str
    default: []
  interval:
    description: Seconds from the start of one round to the start of the next (at least 1). A round that takes longer
      is followed at once by the next.
    type: float
    default: 5.0
  become:
    description:
      - Check with privilege escalation, as the heal does (C(autoheal_become)); reading logs and sockets needs it.
      - On hosts with the executor (where the inventory's C(autoheal_enforcement) lets the heal use it, C(auto) by
        default) the check is a request to the executor instead, with no become, as the heal's own check is.
    type: bool
    default: true
  log_lines:
    description: Lines of each log file a failing service's evidence carries.
    type: int
    default: 20
  host_query:
    description:
      - A JMESPath expression naming the inventory host to heal for a failing service, over C(host), C(service),
        C(failure_class), C(summary), C(checks) and C(evidence) (the watched host and service and its check's result),
        as the alert webhook's O(host_query) reads an alert. Empty, the watched host itself (C(host)).
      - The result must name an inventory host literally and O(service_query)'s result a service that host declares;
        anything else is logged and nothing is healed.
    type: str
  service_query:
    description: A JMESPath expression naming the declared service to heal, over the same document. Empty, the watched
      service itself (C(service)).
    type: str
"""

EXAMPLES = r"""
- name: Heal what fails, with no monitor of its own
  hosts: all
  sources:
    - sentinel.heal.watchdog:
        inventory: inventory/
        interval: 2
        services: [nginx, postgresql]
  rules:
    - name: Heal the failing service
      condition: event.sentinel.source == "watchdog"
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

from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.events import EventMapping  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.fleet import read_fleet  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.options import WATCHDOG_OPTIONS, source_options  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.throttle import admit, fleet_settings  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.watch import Watch  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.exec.leash import Leash  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory  # noqa: E402

logger = logging.getLogger("sentinel.heal.watchdog")
# a round that hangs (a host that stops answering mid-check) is killed after this long and counts as unchecked
ROUND_TIMEOUT_S = 120.0


async def main(queue: asyncio.Queue[Any], args: dict[str, Any]) -> None:
    options = source_options("watchdog", WATCHDOG_OPTIONS, args)
    mapping = EventMapping.of(options["host_query"], options["service_query"])
    fleet = read_fleet(options["inventory"], options["hosts"])
    watch = Watch.of(fleet, options["services"], mapping)
    settings = fleet_settings(fleet)
    memory = Memory.from_options(fleet.memory_options())
    command = watch.command(options["inventory"], options["become"], options["log_lines"])
    logger.info("watching %s every %gs", ", ".join(f"{host}: {' '.join(names)}" for host, names in sorted(watch.targets.items())),
                options["interval"])
    loop = asyncio.get_running_loop()
    # Ctrl-C or SIGTERM ends ansible-rulebook inside its Java engine (exit 130) with no Python cleanup: the leash's
    # watcher kills a round in flight when this process goes, however it goes
    leash = Leash()
    try:
        while True:
            started = loop.time()
            requests, notes = watch.observe(await _round(command, watch.environment(), leash))
            for note in notes:
                logger.warning("%s", note)
            for request in requests:
                logger.warning("%s: %s is failing: %s", request.host, request.service, request.facts.get("summary", ""))
            admitted = admit(requests, memory, settings, at=time.time()) if requests else None
            for event in admitted.events if admitted else []:
                await queue.put(event)
            for line in admitted.absorbed if admitted else []:
                logger.warning("no job: %s", line)
            await asyncio.sleep(max(0.0, options["interval"] - (loop.time() - started)))
    finally:
        leash.release()
        memory.close()


async def _round(command: list[str], env: dict[str, str], leash: Leash) -> str:
    """One round's output; the ansible run is killed when the source is cancelled or the round hangs."""
    process = await asyncio.create_subprocess_exec(*command, env=env, stdin=asyncio.subprocess.DEVNULL,
                                                   stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE)
    leash.watch(process.pid)
    try:
        stdout, _stderr = await asyncio.wait_for(process.communicate(), ROUND_TIMEOUT_S)
    except TimeoutError:
        logger.warning("a round took longer than %gs and was stopped", ROUND_TIMEOUT_S)
        return ""
    finally:
        if process.returncode is None:
            leash.kill()  # the ansible run and its workers, not the run alone
            await process.wait()
        leash.watch(0)
    return stdout.decode("utf-8", "replace")
