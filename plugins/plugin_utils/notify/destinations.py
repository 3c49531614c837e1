"""Where notifications go: the ``notify`` option (the role's ``autoheal_notify``), checked into :class:`Destination`.

A destination's URL and routing key are secrets (an incoming webhook's URL is its credential): they are ``no_log`` in
the argument spec, and nothing here says them - a destination is named by its ``name`` or its place in the list."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Mapping, Sequence
from urllib.parse import urlsplit

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError

TYPES = ("slack", "mattermost", "teams", "pagerduty", "webhook")
PAGERDUTY_EVENTS_URL = "https://events.pagerduty.com/v2/enqueue"
DEFAULT_TIMEOUT_S = 5.0
DEFAULT_RETRIES = 2
MAX_TIMEOUT_S = 60.0
MAX_RETRIES = 5
# what an incident or a fleet incident may say (one message per state change, never per attempt):
# healed is every heal, a first try's too; resolved a heal after a wait (approval, systemd, more attempts) or a relapse;
# approved a plan a person approved (PagerDuty acknowledges the incident), denied one a person refused (who and why)
EVENTS = ("escalated", "awaiting_approval", "resolved", "healed", "approved", "denied", "fleet_opened", "fleet_closed")
DEFAULT_EVENTS = ("escalated", "awaiting_approval", "resolved", "denied", "fleet_opened", "fleet_closed")
# on call, a person's approval acknowledges the page the wait opened
DEFAULT_EVENTS_OF = {"pagerduty": (*DEFAULT_EVENTS, "approved")}

# the option of the tasks that tell people (heal, execute, approval: doc_fragments/notify.py); the role's and the
# playbooks' autoheal_notify
NOTIFY_OPTION: dict[str, Any] = dict(
    type="list", elements="dict", default=[],
    options=dict(
        type=dict(type="str", required=True, choices=list(TYPES)),
        name=dict(type="str"),
        url=dict(type="str", no_log=True),
        routing_key=dict(type="str", no_log=True),
        timeout=dict(type="float", default=DEFAULT_TIMEOUT_S),
        retries=dict(type="int", default=DEFAULT_RETRIES),
        events=dict(type="list", elements="str", choices=list(EVENTS)),
        interactive=dict(type="bool", default=False),
    ),
)


@dataclass(frozen=True)
class Destination:
    """One place messages go. ``key``: what names it in the run's ledger without saying its URL."""

    type: str
    name: str
    url: str
    timeout: float = DEFAULT_TIMEOUT_S
    retries: int = DEFAULT_RETRIES
    events: frozenset[str] = frozenset(DEFAULT_EVENTS)
    routing_key: str = ""
    # Slack: a waiting plan's message has Approve and Deny buttons, answered by the approval page's /slack/interactive
    interactive: bool = False

    def __repr__(self) -> str:  # a traceback or a debug line never shows the URL or the key
        return f"Destination({self.name})"

    def wants(self, event: str) -> bool:
        return event in self.events

    @property
    def most_time_s(self) -> float:
        """The longest this destination can take in a run: every try timing out."""
        return self.timeout * (self.retries + 1)


def destinations_from(options: Sequence[Mapping[str, Any]] | None, option: str = "notify") -> list[Destination]:
    """The checked destinations of the option (``option``: its name as the person wrote it, ``autoheal_notify`` in the
    role); a ConfigError names the entry, the field and the value (never a URL or key: it says only what is wrong with
    it)."""
    destinations = []
    for index, entry in enumerate(options or []):
        where = f"{option}[{index}]"
        if not isinstance(entry, Mapping):
            raise ConfigError(f"{where} must be a dict with a type and a url", field=where, value=type(entry).__name__)
        kind = str(entry.get("type") or "")
        if kind not in TYPES:
            raise ConfigError(f"{where}.type must be one of {', '.join(TYPES)}", field=f"{where}.type", value=entry.get("type"))
        name = str(entry.get("name") or f"{where} ({kind})")
        routing_key = str(entry.get("routing_key") or "")
        url = str(entry.get("url") or (PAGERDUTY_EVENTS_URL if kind == "pagerduty" else ""))
        if kind == "pagerduty" and not routing_key:
            raise ConfigError(f"{where}: a pagerduty destination needs the routing_key of an Events API v2 integration",
                              field=f"{where}.routing_key", value="(empty)", hint="the key from the service's Integrations tab, from a vault")
        _check_url(url, where, kind)
        interactive = entry.get("interactive", False)
        if not isinstance(interactive, bool) or (interactive and kind != "slack"):
            raise ConfigError(f"{where}.interactive is true or false, and true only for slack (its Approve and Deny buttons)",
                              field=f"{where}.interactive", value=interactive, hint="other destinations link to the approval page")
        destinations.append(Destination(
            type=kind, name=name, url=url, routing_key=routing_key,
            timeout=_number(entry.get("timeout", DEFAULT_TIMEOUT_S), f"{where}.timeout", 0.1, MAX_TIMEOUT_S, float),
            retries=int(_number(entry.get("retries", DEFAULT_RETRIES), f"{where}.retries", 0, MAX_RETRIES, int)),
            events=_events(entry.get("events"), f"{where}.events", kind), interactive=interactive,
        ))
    return destinations


def _check_url(url: str, where: str, kind: str) -> None:
    parts = urlsplit(url)
    if not url:
        raise ConfigError(f"{where}: a {kind} destination needs its url", field=f"{where}.url", value="(empty)",
                          hint="the incoming webhook's URL, from a vault or the environment (it is a secret)")
    if parts.scheme not in ("https", "http") or not parts.hostname:
        # the URL is a secret: only its scheme is said
        raise ConfigError(f"{where}.url must be an http(s) URL with a host", field=f"{where}.url",
                          value=f"{parts.scheme or '(no scheme)'}://...", hint="https://hooks.example.com/...")


def _number(value: Any, field: str, low: float, high: float, kind: type) -> float:
    try:
        number = kind(value)
    except (TypeError, ValueError):
        number = None
    if number is None or isinstance(value, bool) or not low <= number <= high:
        raise ConfigError(f"{field} must be a number from {low:g} to {high:g}", field=field, value=value)
    return float(number)


def _events(value: Any, field: str, kind: str) -> frozenset[str]:
    if value is None:
        return frozenset(DEFAULT_EVENTS_OF.get(kind, DEFAULT_EVENTS))
    if isinstance(value, str) or not isinstance(value, Sequence):
        raise ConfigError(f"{field} must be a list of events", field=field, value=value, hint=f"some of {', '.join(EVENTS)}")
    unknown = [event for event in value if event not in EVENTS]
    if unknown:
        raise ConfigError(f"{field} names an event there is none of", field=field, value=unknown[0], hint=f"one of {', '.join(EVENTS)}")
    return frozenset(str(event) for event in value)
