"""Alerts of many hosts at once against a real inventory and a real memory (SQLite and PostgreSQL): a job per host until
the service is alerted on autoheal_fleet_min_hosts hosts within the window, then one fleet event for all of them, and
nothing more about it until the window ends - also for a source started again (a rulebook restarted)."""

from __future__ import annotations

from pathlib import Path

from memory_places import MemoryPlace

from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.events import HealRequest
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.fleet import read_fleet
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.throttle import admit, fleet_settings

INVENTORY = """
web:
  hosts: {web1: {}, web2: {}, web3: {}, web4: {}}
  vars:
    autoheal_services: [{name: nginx}, {name: redis}]
    autoheal_fleet_min_hosts: 3
    autoheal_fleet_window: 300
"""


def _alert(host: str, service: str = "nginx") -> HealRequest:
    return HealRequest(host=host, service=service, source="alertmanager", reason="alert ServiceDown")


def test_a_service_alerted_on_many_hosts_is_one_fleet_job_and_the_window_absorbs_the_rest_across_a_restart(
        tmp_path: Path, memory_place: MemoryPlace) -> None:
    (tmp_path / "hosts.yml").write_text(INVENTORY)
    fleet = read_fleet(str(tmp_path / "hosts.yml"))
    settings = fleet_settings(fleet)
    assert (settings.min_hosts, settings.window) == (3, 300)
    assert fleet.heal_vars["autoheal_state_dir"] == "~/.local/state/sentinel-heal"  # the role's default, as the jobs see it
    with memory_place.open() as memory:
        first = admit([_alert("web1"), _alert("web2"), _alert("web1", "redis")], memory, settings, at=1000.0)
        assert [event["sentinel"]["host"] for event in first.events] == ["web1", "web2", "web1"] and first.absorbed == []
        third = admit([_alert("web3")], memory, settings, at=1010.0)
        [event] = third.events
        assert event == {"sentinel": {"hosts": ["web1", "web2", "web3"], "service": "nginx", "source": "alertmanager",
                                      "reason": "nginx alerted on 3 hosts within 300 s: one fleet job"},
                         "meta": {"hosts": "web1,web2,web3"}}
        # redis on one host still has its own job; nginx anywhere else in the window has none
        later = admit([_alert("web4"), _alert("web2", "redis")], memory, settings, at=1100.0)
        assert [event["sentinel"]["host"] for event in later.events] == ["web2"]
        assert later.absorbed == ["nginx on web4: the fleet job 1 of this window covers it (no job of its own)"]
    with memory_place.open() as restarted:  # a rulebook started again, within the window: the memory's throttle holds
        assert admit([_alert("web1")], restarted, settings, at=1200.0).events == []
        # the window over: the alerts of the last 300 s name two hosts (web4, web1), so web1 has a job of its own again
        after = admit([_alert("web1")], restarted, settings, at=1400.0)
        assert [event["sentinel"]["host"] for event in after.events] == ["web1"]
