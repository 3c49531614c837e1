from __future__ import annotations

from typing import Callable, Iterator

from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.leases import (
    LEASE_GRACE_S,
    LEASE_RENEW_DEADLINE_S,
    LEASE_RENEW_S,
    LEASE_RETRY_S,
    Heartbeat,
    Renewal,
    lease_ended,
    process_owner,
)


def _beating(answers: Iterator[Renewal]) -> tuple[Heartbeat, list[float], Callable[[int], list[str | None]]]:
    """A heartbeat whose renewals the memory answers with ``answers`` in turn, polled once a second from 100."""
    now = [100.0]
    renewals: list[float] = []

    def renew(at: float) -> Renewal:
        renewals.append(at)
        return next(answers)

    beat = Heartbeat(renew, lambda: now[0], since=100.0)

    def poll(seconds: int) -> list[str | None]:
        said = []
        for _second in range(seconds):
            now[0] += 1.0
            said.append(beat())
        return said

    return beat, renewals, poll


def test_a_heartbeat_polled_every_second_writes_the_lease_at_most_every_renewal_period() -> None:
    _beat, renewals, poll = _beating(iter(lambda: Renewal.RENEWED, None))
    assert set(poll(int(LEASE_RENEW_S * 3))) == {None}
    assert renewals == [100.0 + LEASE_RENEW_S, 100.0 + 2 * LEASE_RENEW_S, 100.0 + 3 * LEASE_RENEW_S]


def test_a_lease_another_job_took_back_is_lost_at_once_and_stays_lost() -> None:
    beat, renewals, poll = _beating(iter([Renewal.RENEWED, Renewal.LOST]))
    said = poll(int(LEASE_RENEW_S * 2))
    assert said[-1] == "another job found its lease ended and recorded this remediation as interrupted"
    assert said[:-1] == [None] * (len(said) - 1)
    assert poll(int(LEASE_RENEW_S * 2)) == [beat.lost] * int(LEASE_RENEW_S * 2) and len(renewals) == 2  # never renewed again


def test_renewals_the_memory_does_not_take_are_retried_and_the_holder_gives_up_before_anyone_may_take_its_lease() -> None:
    beat, renewals, poll = _beating(iter(lambda: Renewal.NOT_WRITTEN, None))
    said = poll(int(LEASE_GRACE_S))
    first_lost = said.index(beat.lost)
    assert first_lost + 1 == int(LEASE_RENEW_DEADLINE_S) + 1 < LEASE_GRACE_S  # the holder stops first, by a whole period
    assert beat.lost == (f"the memory took no renewal of its lease for {LEASE_RENEW_DEADLINE_S + 1:.0f} s, and another job may "
                         f"take the lease up {LEASE_GRACE_S:.0f} s after the last one")
    tried = [at - 100.0 for at in renewals]
    assert tried[:3] == [LEASE_RENEW_S, LEASE_RENEW_S + LEASE_RETRY_S, LEASE_RENEW_S + 2 * LEASE_RETRY_S]


def test_a_renewal_taken_after_some_were_not_holds_the_lease_again() -> None:
    _beat, renewals, poll = _beating(iter([Renewal.NOT_WRITTEN, Renewal.NOT_WRITTEN, *[Renewal.RENEWED] * 10]))
    assert set(poll(int(LEASE_GRACE_S * 2))) == {None}
    tried = [at - 100.0 for at in renewals]
    assert tried[:4] == [LEASE_RENEW_S, LEASE_RENEW_S + LEASE_RETRY_S, LEASE_RENEW_S + 2 * LEASE_RETRY_S, 2 * LEASE_RENEW_S + 2 * LEASE_RETRY_S]


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
