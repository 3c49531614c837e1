"""The notify option checked: each error names the entry, the field and the value, and never a URL or a key."""

from __future__ import annotations

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.destinations import PAGERDUTY_EVENTS_URL, destinations_from


def test_defaults() -> None:
    [slack, pagerduty] = destinations_from([{"type": "slack", "url": "https://hooks.slack.com/services/T/B/SECRET"},
                                            {"type": "pagerduty", "routing_key": "R0UTINGKEY"}])
    assert (slack.timeout, slack.retries, slack.name) == (5.0, 2, "notify[0] (slack)")
    assert not slack.wants("healed") and slack.wants("escalated") and not slack.wants("approved")
    assert pagerduty.url == PAGERDUTY_EVENTS_URL and pagerduty.wants("approved")
    assert "SECRET" not in repr(slack) and "R0UTINGKEY" not in repr(pagerduty)


@pytest.mark.parametrize(("entry", "field", "value"), [
    ({"type": "irc", "url": "https://x.example"}, "notify[0].type", "irc"),
    ({"type": "slack"}, "notify[0].url", "(empty)"),
    ({"type": "teams", "url": "ftp://secret-host.example/hook"}, "notify[0].url", "ftp://..."),
    ({"type": "pagerduty"}, "notify[0].routing_key", "(empty)"),
    ({"type": "webhook", "url": "https://x.example", "timeout": 0}, "notify[0].timeout", 0),
    ({"type": "webhook", "url": "https://x.example", "retries": 50}, "notify[0].retries", 50),
    ({"type": "webhook", "url": "https://x.example", "events": ["everything"]}, "notify[0].events", "everything"),
])
def test_errors_name_the_field_and_the_value(entry: dict[str, object], field: str, value: object) -> None:
    with pytest.raises(ConfigError) as raised:
        destinations_from([entry])
    assert (raised.value.field, raised.value.value) == (field, value)
    assert "secret-host" not in str(raised.value)


def test_the_role_names_its_variable() -> None:
    with pytest.raises(ConfigError, match=r"autoheal_notify\[1\]\.type"):
        destinations_from([{"type": "slack", "url": "https://x.example"}, {"type": "fax"}], "autoheal_notify")
