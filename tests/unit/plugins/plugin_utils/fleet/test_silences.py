"""Silences in a real memory (SQLite and PostgreSQL): what one covers and until when; and the durations they are given."""

from __future__ import annotations

import re

import pytest
from memory_places import MemoryPlace

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.silences import ALL_SERVICES, Silences, silence_seconds


def test_a_silence_covers_its_hosts_groups_and_service_until_it_ends_or_is_lifted(memory_place: MemoryPlace) -> None:
    with memory_place.open() as memory:
        web = Silences(memory.database).silence(hosts="web*", service="nginx", until=200.0, reason="disk swap", by="alice", at=100.0)
        Silences(memory.database).silence(hosts="dbservers", service=ALL_SERVICES, until=150.0, reason="failover", by="bob", at=100.0)
        assert Silences(memory.database).silence_over("web1", (), "nginx", at=120.0) == web
        assert Silences(memory.database).silence_over("web1", (), "redis", at=120.0) is None  # another service
        assert Silences(memory.database).silence_over("db3", ("dbservers",), "postgresql", at=120.0) is not None  # through its group
        assert Silences(memory.database).silence_over("db3", ("dbservers",), "postgresql", at=151.0) is None  # ended
        assert [silence.reason for silence in Silences(memory.database).silences(at=120.0)] == ["disk swap", "failover"]
        assert Silences(memory.database).unsilence(by="carol", at=130.0, hosts="web*", dry_run=True) == [web]  # as it is: nothing lifted
        assert Silences(memory.database).silence_over("web1", (), "nginx", at=130.0) == web
        [lifted] = Silences(memory.database).unsilence(by="carol", at=130.0, hosts="web*")
        assert (lifted.id, lifted.lifted_by) == (web.id, "carol")
        assert Silences(memory.database).silence_over("web1", (), "nginx", at=131.0) is None
        assert Silences(memory.database).unsilence(by="carol", at=131.0, silence_id=web.id) == []  # once


@pytest.mark.parametrize(("duration", "seconds"), [("90", 90), ("90s", 90), ("30m", 1800), ("2h", 7200), ("1.5d", 129600)])
def test_a_silence_lasts_what_its_duration_says(duration: str, seconds: float) -> None:
    assert silence_seconds(duration) == seconds


@pytest.mark.parametrize("duration", ["", "soon", "-5m", "0", "2w", "91d"])
def test_a_duration_that_is_not_one_is_refused_naming_it(duration: str) -> None:
    with pytest.raises(ConfigError, match=f"field: duration; value: '{re.escape(duration)}'"):
        silence_seconds(duration)
