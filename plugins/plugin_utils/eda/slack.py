# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Slack's interactive requests, as Slack says to verify them: ``X-Slack-Signature`` is ``v0=`` and the HMAC-SHA256,
under the app's signing secret, of ``v0:`` + ``X-Slack-Request-Timestamp`` + ``:`` + the raw body; a timestamp more
than five minutes from now is refused (a replay), and the signature is compared in constant time, before anything of
the body is read. The body is a form whose ``payload`` is the interaction's JSON: a button of a waiting plan's message
(notify/formats.py) carries the plan's approval link token as its value."""

from __future__ import annotations

import hashlib
import hmac
import json
from dataclasses import dataclass
from typing import Any, Mapping
from urllib.parse import parse_qs

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import SentinelError
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.links import SLACK_APPROVE, SLACK_DENY, SLACK_OPEN

# Slack's own bound on a request's age
MAX_AGE_S = 300
DECISIONS = {SLACK_APPROVE: "approved", SLACK_DENY: "denied", SLACK_OPEN: ""}


class SlackRefused(SentinelError):
    """A request Slack did not sign, or signed too long ago: ``kind`` is ``slack_signature`` or ``slack_timestamp``."""

    def __init__(self, message: str, kind: str) -> None:
        self.kind = kind
        header = "X-Slack-Signature" if kind == "slack_signature" else "X-Slack-Request-Timestamp"
        super().__init__(message, field=header, value="(as sent)", hint="the Slack app's signing secret (Basic Information), and a clock in sync")


@dataclass(frozen=True)
class SlackAction:
    """A button pressed: who (Slack's user id) and which, the decision it stands for (empty: the link button, which
    only opens the page) and the link token it carries."""

    user_id: str
    action_id: str
    decision: str
    token: str


def verify_slack_request(signing_secret: str, headers: Mapping[str, str], body: bytes, *, now: float) -> None:
    """Nothing, when Slack signed this very body within the last five minutes; else SlackRefused."""
    stamp = headers.get("X-Slack-Request-Timestamp", "")
    signature = headers.get("X-Slack-Signature", "")
    if not stamp.isdigit():
        raise SlackRefused("no X-Slack-Request-Timestamp: not a request Slack signed", "slack_timestamp")
    if abs(now - int(stamp)) > MAX_AGE_S:
        raise SlackRefused(f"the request was signed {int(now - int(stamp))} s from now, more than {MAX_AGE_S} s: a replay, or a clock off",
                           "slack_timestamp")
    expected = "v0=" + hmac.new(signing_secret.encode(), b"v0:" + stamp.encode() + b":" + body, hashlib.sha256).hexdigest()
    if not hmac.compare_digest(signature.encode(), expected.encode()):
        raise SlackRefused("X-Slack-Signature does not hold for this body under the signing secret", "slack_signature")


def slack_action(body: bytes) -> SlackAction | None:
    """The button of a signed ``block_actions`` request that is one of a waiting plan's; None for anything else."""
    try:
        payload: Any = json.loads(parse_qs(body.decode("utf-8")).get("payload", ["{}"])[0])
    except (UnicodeDecodeError, ValueError):
        return None
    if not isinstance(payload, dict) or payload.get("type") != "block_actions":
        return None
    user, actions = payload.get("user"), payload.get("actions")
    if not isinstance(user, dict) or not isinstance(actions, list) or not actions or not isinstance(actions[0], dict):
        return None
    action = actions[0]
    action_id = action.get("action_id")
    if action_id not in DECISIONS:
        return None
    return SlackAction(user_id=str(user.get("id") or ""), action_id=str(action_id), decision=DECISIONS[str(action_id)],
                       token=str(action.get("value") or ""))
