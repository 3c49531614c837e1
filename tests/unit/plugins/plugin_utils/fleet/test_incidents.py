"""Fleet incidents in a real memory (SQLite and PostgreSQL): when many hosts failing alike are one incident, what their
evidence has in common, joining an open incident, closing it once every host was seen clear, and the forks' gather."""

from __future__ import annotations

import dataclasses
from typing import Any

import pytest
from memory_places import MemoryPlace

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import (
    FleetIncidents,
    FleetSettings,
    common_to,
    counted,
    gather,
    sighting_of,
    signature_of,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Failure
from helpers import NGINX_SPEC

UPSTREAM_LINE = ('2026/11/28 13:00:0{n} [error] 81{n}#81{n}: *1 connect() failed (111: Connection refused) while connecting to upstream, '
                 'client: 127.0.0.1, server: _, request: "GET / HTTP/1.1", upstream: "http://10.77.0.1:8081/", host: "127.0.0.1"')


def upstream_down(host: str, n: int = 1, *, packages: list[dict[str, Any]] | None = None) -> Failure:
    """nginx answering 502 on ``host`` because its upstream on the controller's side is down, as service_check says it."""
    return Failure(host=host, service="nginx", failure_class="http_error",
                   summary="http://127.0.0.1/: status 502 (expected 200)",
                   evidence={"logs": {"/var/log/nginx/error.log": f"2026/11/28 12:00:00 [notice] 1#1: start worker {n}\n{UPSTREAM_LINE.format(n=n)}"},
                             "changes": {"files": [], "packages": packages or []},
                             "disk": [{"path": "/var/log/nginx", "full": False, "inodes_exhausted": False}]},
                   spec=NGINX_SPEC)


def test_the_same_failure_on_hosts_of_other_releases_has_one_signature_and_another_failure_another() -> None:
    web1, web2 = upstream_down("web1", 1), dataclasses.replace(upstream_down("web2", 2), facts={"os": {"id": "ubuntu"}})
    assert signature_of(web1) == signature_of(web2)
    assert signature_of(web1) != signature_of(dataclasses.replace(web1, summary="tcp 127.0.0.1:80: Connection refused"))
    assert signature_of(web1) != signature_of(dataclasses.replace(web1, failure_class="not_running"))


def test_what_the_hosts_evidence_has_in_common_is_said_the_address_and_the_package_change_first() -> None:
    upgrade = [{"package": "libssl3", "action": "upgrade", "before": "3.0.15-1", "after": "3.0.17-1", "at": 1.0}]
    sightings = [sighting_of(upstream_down(f"web{n}", n, packages=upgrade), run_id="run", at=100.0 + n) for n in range(1, 4)]
    common = common_to(sightings)
    # the upstream the hosts share leads; the loopback addresses each host has of its own are no clue
    assert common[0] == "the same address http://10.77.0.1:8081"
    assert not any("127.0.0.1" in said and "address" in said for said in common)
    assert any("package libssl3 upgrade 3.0.15-1 -> 3.0.17-1" in said for said in common)
    assert any(said.startswith("the same error line") and "connect() failed (111: Connection refused)" in said for said in common)
    # the pid and the time differ on each host; the line compares without them, and the worker's start is no clue
    assert not any("start worker" in said for said in common)
    assert common_to(sightings[:1]) == ()
    other = sighting_of(upstream_down("web9", 9), run_id="run", at=109.0)
    assert not any("libssl3" in said for said in common_to([*sightings, other]))


@pytest.mark.parametrize(("window", "in_run", "run_hosts", "settings", "crossed"), [
    (5, 1, 1, FleetSettings(), True), (4, 4, 4, FleetSettings(min_hosts=5, min_percent=0), False), (4, 4, 4, FleetSettings(), True),
    (2, 2, 2, FleetSettings(), False), (3, 3, 6, FleetSettings(), True), (3, 3, 7, FleetSettings(), False),
    (10, 10, 10, FleetSettings(min_hosts=0, min_percent=0), False), (1, 1, 1, FleetSettings(min_hosts=1), True),
])
def test_thresholds_hosts_within_the_window_or_a_share_of_the_run_from_three_hosts_on(
        window: int, in_run: int, run_hosts: int, settings: FleetSettings, crossed: bool) -> None:
    assert settings.crossed(hosts_in_window=window, hosts_in_run=in_run, run_hosts=run_hosts) is crossed


@pytest.mark.parametrize(("options", "prefix", "field"), [
    ({"fleet_min_hosts": -1}, "", "fleet_min_hosts"), ({"fleet_min_percent": 101}, "", "fleet_min_percent"),
    ({"fleet_window": 90000}, "", "fleet_window"),
    # an inventory's values, untyped, as an event source reads them
    ({"autoheal_fleet_min_hosts": "five"}, "autoheal_", "autoheal_fleet_min_hosts"),
    ({"autoheal_fleet_window": "1.5"}, "autoheal_", "autoheal_fleet_window"),
])
def test_a_setting_out_of_range_or_not_a_whole_number_is_refused_naming_it(options: dict[str, Any], prefix: str, field: str) -> None:
    with pytest.raises(ConfigError) as raised:
        FleetSettings.from_options(options, prefix)
    assert raised.value.field == field and raised.value.value == options[field]
    assert FleetSettings.from_options({"autoheal_fleet_min_hosts": "3", "autoheal_fleet_window": 60}, "autoheal_") == \
        FleetSettings(min_hosts=3, min_percent=50, window=60)


def test_hosts_failing_alike_open_one_incident_others_join_it_and_it_closes_once_every_host_was_seen_clear(memory_place: MemoryPlace) -> None:
    settings = FleetSettings(min_hosts=3, min_percent=0, window=600)
    with memory_place.open() as memory:
        first = [sighting_of(upstream_down(f"web{n}", n), run_id="run-1", at=1000.0 + n) for n in (1, 2)]
        for sighting in first:
            FleetIncidents(memory.database).report_check(sighting.host, [sighting], [], at=sighting.seen_at)
        assert FleetIncidents(memory.database).run_hosts_sighted("run-1") == 2
        assert FleetIncidents(memory.database).fleet_incident_of(first[0], settings, run_hosts=2) is None  # two hosts: not yet
        third = sighting_of(upstream_down("web3", 3), run_id="run-1", at=1003.0)
        FleetIncidents(memory.database).report_check("web3", [third], ["redis"], at=third.seen_at)
        incident = FleetIncidents(memory.database).fleet_incident_of(third, settings, run_hosts=3)
        assert incident is not None and incident.hosts == ("web1", "web2", "web3")
        assert (incident.first_seen, incident.last_seen) == (1001.0, 1003.0)
        assert any("http://10.77.0.1:8081" in said for said in incident.common)
        assert incident.describe().startswith(f"fleet incident {incident.id}: nginx fails the same way on 3 hosts within 2 s (web1, web2, web3)")
        # the same hosts counting again find the same incident; a host of a later run (an EDA job) joins it
        assert FleetIncidents(memory.database).fleet_incident_of(first[0], settings, run_hosts=3) == incident
        later = sighting_of(upstream_down("web4", 4), run_id="eda-7", at=1200.0)
        FleetIncidents(memory.database).report_check("web4", [later], [], at=later.seen_at)
        joined = FleetIncidents(memory.database).fleet_incident_of(later, settings, run_hosts=1)
        assert joined is not None and joined.id == incident.id and joined.hosts[-1] == "web4" and joined.last_seen == 1200.0
        assert FleetIncidents(memory.database).fleet_incidents(open_only=True) == [joined]
        # seen clear one by one (healed, or its check in a later run): open until the last
        assert FleetIncidents(memory.database).clear_fleet_incidents("web1", ["nginx"], at=1300.0) == []
        for host in ("web2", "web3"):
            assert FleetIncidents(memory.database).report_check(host, [], ["nginx", "redis"], at=1300.0) == []
        (closed,) = FleetIncidents(memory.database).report_check("web4", [], ["nginx"], at=1301.0)
        assert closed.id == incident.id and closed.closed_at == 1301.0 and set(closed.cleared) == {"web1", "web2", "web3", "web4"}
        incidents = FleetIncidents(memory.database)
        assert incidents.fleet_incidents(open_only=True) == [] and incidents.fleet_incidents()[0].closed_at == 1301.0
        # the failure again, later: a new incident, not the closed one
        again = [sighting_of(upstream_down(f"web{n}", n), run_id="run-2", at=5000.0 + n) for n in (1, 2, 3)]
        for sighting in again:
            FleetIncidents(memory.database).report_check(sighting.host, [sighting], [], at=sighting.seen_at)
        reopened = FleetIncidents(memory.database).fleet_incident_of(again[0], settings, run_hosts=3)
        assert reopened is not None and reopened.id != incident.id


def test_sightings_older_than_the_window_do_not_count_and_a_prune_forgets_them_with_closed_incidents(memory_place: MemoryPlace) -> None:
    settings = FleetSettings(min_hosts=3, min_percent=0, window=60)
    with memory_place.open() as memory:
        old = [sighting_of(upstream_down(f"web{n}", n), run_id=f"eda-{n}", at=100.0 * n) for n in (1, 2, 3)]
        for sighting in old:
            FleetIncidents(memory.database).report_check(sighting.host, [sighting], [], at=sighting.seen_at)
        assert FleetIncidents(memory.database).fleet_incident_of(old[-1], settings, run_hosts=1) is None  # 100 s apart: never three within a minute
        memory.prune(before=250.0)
        assert FleetIncidents(memory.database).run_hosts_sighted("eda-1") == 0 and FleetIncidents(memory.database).run_hosts_sighted("eda-3") == 1


def test_the_forks_gather_until_the_whole_run_wrote_or_nobody_wrote_for_the_gap() -> None:
    now = [0.0]

    def sleep(seconds: float) -> None:
        now[0] += seconds

    arrivals = iter([1, 2, 2, 3, 5, 5, 5])
    gather(lambda: next(arrivals), run_hosts=5, clock=lambda: now[0], sleep=sleep, gap=1.0, window=5.0)
    assert now[0] == pytest.approx(0.8)  # all five wrote
    quiet = iter([1, 2] + [2] * 100)
    now[0] = 0.0
    gather(lambda: next(quiet), run_hosts=5, clock=lambda: now[0], sleep=sleep, gap=1.0, window=5.0)
    assert now[0] == pytest.approx(1.2)  # the second came at 0.2; nobody for the gap (1 s here) after
    growing = iter(range(1, 1000))
    now[0] = 0.0
    gather(lambda: next(growing), run_hosts=1000, clock=lambda: now[0], sleep=sleep, gap=1.0, window=5.0)
    assert now[0] == pytest.approx(5.0)  # never longer than the window
    gather(lambda: pytest.fail("a run of one host waits for nobody"), run_hosts=1)


def test_a_unit_a_person_masked_or_a_service_a_person_silenced_counts_toward_no_fleet_incident() -> None:
    masked = dataclasses.replace(upstream_down("web1"), failure_class="masked")
    silenced, failing = upstream_down("web2"), upstream_down("web3")
    said = {"web2": "silenced by alice until 2026-11-29 06:00:00 UTC: upstream migration"}
    assert counted([masked, silenced, failing], lambda failure: said.get(failure.host)) == [failing]
