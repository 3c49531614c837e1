"""Maintenance windows declared in the inventory: when they cover a service, and clear errors when they cannot be read."""

from __future__ import annotations

import datetime
import zoneinfo

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.silences import hands_off, maintenance_windows

BERLIN = zoneinfo.ZoneInfo("Europe/Berlin")


def at(text: str) -> float:
    """A Berlin wall-clock time as seconds since the epoch."""
    return datetime.datetime.fromisoformat(text).replace(tzinfo=BERLIN).timestamp()


def test_a_recurring_window_past_midnight_covers_its_days_evenings_and_the_mornings_after() -> None:
    [window] = maintenance_windows([{"name": "patching", "days": ["sat"], "start": "22:00", "end": "04:00", "timezone": "Europe/Berlin",
                                     "services": ["nginx"]}])
    assert window.covers("nginx", at("2026-11-28T23:30"))  # Saturday night
    assert window.covers("nginx", at("2026-11-29T03:59"))  # Sunday morning, the part after midnight
    assert not window.covers("nginx", at("2026-11-29T04:00"))
    assert not window.covers("nginx", at("2026-11-27T23:30"))  # Friday night
    assert not window.covers("redis", at("2026-11-28T23:30"))  # another service
    assert window.describe() == "in the maintenance window 'patching' (sat 22:00-04:00 Europe/Berlin)"


def test_a_window_that_holds_a_service_says_when_it_ends_and_where_it_is_declared() -> None:
    [window] = maintenance_windows([{"name": "patching", "days": ["sat"], "start": "22:00", "end": "04:00", "timezone": "Europe/Berlin"}])
    # the evening part ends the morning after, the morning part the same morning
    assert window.ends_after(at("2026-11-28T23:30")) == window.ends_after(at("2026-11-29T01:00")) == at("2026-11-29T04:00")
    held = hands_off(None, None, [window], "nginx", at("2026-11-28T23:30"), "web1")
    assert held is not None and (held.limit, held.until) == ("maintenance_window", at("2026-11-29T04:00"))
    assert held.lift == "take the window 'patching' out of autoheal_maintenance_windows (the heal's maintenance_windows) in the inventory"
    assert hands_off(None, None, [window], "nginx", at("2026-11-29T04:00"), "web1") is None


def test_a_daily_window_in_utc_and_a_one_off_window() -> None:
    daily, move = maintenance_windows([{"start": "09:00", "end": "10:00"},
                                       {"name": "move", "from": "2026-12-01T20:00+01:00", "until": "2026-12-02T04:00+01:00"}])
    assert daily.covers("anything", datetime.datetime(2026, 11, 24, 9, 30, tzinfo=datetime.UTC).timestamp())
    assert not daily.covers("anything", datetime.datetime(2026, 11, 24, 10, 0, tzinfo=datetime.UTC).timestamp())
    assert daily.describe().endswith("(daily 09:00-10:00 UTC)")
    assert move.covers("postgresql", at("2026-12-02T01:00")) and not move.covers("postgresql", at("2026-12-02T04:00"))


@pytest.mark.parametrize(("window", "field", "message"), [
    ({"start": "22:00", "end": "04:00", "timezone": "Mars/Olympus"}, "w[0].timezone", "not a time zone this controller knows"),
    ({"start": "25:00", "end": "04:00"}, "w[0].start", "not a time of day"),
    ({"start": "22:00", "end": "22:00"}, "w[0].end", "a window that starts when it ends covers nothing"),
    ({"start": "22:00", "end": "04:00", "days": ["someday"]}, "w[0].days", "days are weekday names"),
    ({"from": "2026-12-02T04:00+01:00", "until": "2026-12-01T20:00+01:00"}, "w[0].until", "the window ends before it begins"),
    ({"from": "2026-12-01T20:00", "until": "2026-12-02T04:00+01:00"}, "w[0].from", "a one-off window needs its UTC offset"),
    ({"start": "22:00", "end": "04:00", "weekdays": ["sat"]}, "w[0]", "unknown keys in a window"),
])
def test_a_window_that_cannot_be_read_is_refused_naming_the_window_the_key_and_the_value(window: dict, field: str, message: str) -> None:
    with pytest.raises(ConfigError, match=f"^{message}; field: {field.replace('[', '.').replace(']', '.')}"):
        maintenance_windows([window], "w")
