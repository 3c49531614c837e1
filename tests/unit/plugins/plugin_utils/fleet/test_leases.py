from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.leases import LEASE_GRACE_S, LEASE_RENEW_S, Heartbeat, lease_ended, process_owner


def test_a_heartbeat_polled_every_second_writes_the_lease_at_most_every_renewal_period() -> None:
    now = [100.0]
    renewals: list[float] = []
    beat = Heartbeat(renewals.append, lambda: now[0], since=100.0)
    for _second in range(int(LEASE_RENEW_S * 3)):
        now[0] += 1.0
        beat()
    assert renewals == [100.0 + LEASE_RENEW_S, 100.0 + 2 * LEASE_RENEW_S, 100.0 + 3 * LEASE_RENEW_S]


def test_a_lease_ends_when_its_owner_is_gone_its_renewals_stop_or_its_expiry_passes() -> None:
    elsewhere = "exec-b/17/4242"  # a process of another machine: its heartbeat alone tells
    assert lease_ended(expires_at=1000.0, renewed_at=100.0, owner=elsewhere, at=100.0 + LEASE_GRACE_S) is None
    assert lease_ended(expires_at=1000.0, renewed_at=100.0, owner=elsewhere, at=100.0 + LEASE_GRACE_S + 5) == (
        f"its job stopped renewing its lease ({LEASE_GRACE_S + 5:.0f} s ago)")
    assert lease_ended(expires_at=1000.0, renewed_at=None, owner=elsewhere, at=999.0) is None
    assert lease_ended(expires_at=1000.0, renewed_at=None, owner=elsewhere, at=1001.0) == "its lease expired"
    assert lease_ended(expires_at=1000.0, renewed_at=990.0, owner=process_owner(), at=1001.0) == "its lease expired"
    gone = process_owner().rsplit("/", 1)[0] + "/0"  # this machine, this pid, another start time: the pid was reused
    assert lease_ended(expires_at=1000.0, renewed_at=100.0, owner=gone, at=101.0) == "its job ended"
