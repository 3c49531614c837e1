"""The kill switch in a real memory (SQLite and PostgreSQL): who threw it, when and why, and every job sees it."""

from __future__ import annotations

from memory_places import MemoryPlace

from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.kill_switch import KillSwitch


def test_the_kill_switch_records_who_when_and_why_and_every_process_sees_it(memory_place: MemoryPlace) -> None:
    with memory_place.open() as memory:
        assert KillSwitch(memory.database).suspension() is None and KillSwitch(memory.database).suspended_because() is None
        first, thrown = KillSwitch(memory.database).suspend(by="alice", reason="database failover", at=1_000.0)
        assert thrown and (first.suspended_by, first.reason, first.resumed_at) == ("alice", "database failover", None)
        again, thrown = KillSwitch(memory.database).suspend(by="bob", reason="me too", at=2_000.0)
        assert not thrown and again == first  # the switch that holds is the first, with its reason
        with memory_place.open() as other_job:
            said = KillSwitch(other_job.database).suspended_because() or ""
            assert said.startswith("suspended by alice at ") and said.endswith(": database failover")
        ended = KillSwitch(memory.database).resume(by="carol", at=3_000.0)
        assert ended is not None and (ended.suspended_by, ended.resumed_by, ended.resumed_at) == ("alice", "carol", 3_000.0)
        assert KillSwitch(memory.database).suspension() is None and KillSwitch(memory.database).resume(by="carol", at=3_001.0) is None
