"""Slack's signature, as Slack documents it: v0=HMAC-SHA256(signing secret, "v0:" + timestamp + ":" + body), within
five minutes; and the button of a waiting plan's message read from a signed body."""

from __future__ import annotations

import hashlib
import hmac
import json
from urllib.parse import urlencode

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.slack import SlackRefused, slack_action, verify_slack_request

SECRET = "8f742231b10e8888abcd99yyyzzz85a5"
# Slack's own example (api.slack.com/authentication/verifying-requests-from-slack)
EXAMPLE_BODY = (b"token=xyzz0WbapA4vBCDEFasx0q6G&team_id=T1DC2JH3J&team_domain=testteamnow&channel_id=G8PSS9T3V&channel_name=foobar"
                b"&user_id=U2CERLKJA&user_name=roadrunner&command=%2Fwebhook-collect&text=&response_url=https%3A%2F%2Fhooks.slack.com"
                b"%2Fcommands%2FT1DC2JH3J%2F397700885554%2F96rGlfmibIGlgcZRskXaIFfN&trigger_id=398738663015.47445629121.803a0bc887a14d10d2c447fce8b6703c")
EXAMPLE_STAMP, EXAMPLE_SIGNATURE = "1531420618", "v0=a2114d57b48eac39b9ad189dd8316235a7b4a8d21a10bd27519666489c69b503"


def signed(body: bytes, stamp: int, secret: str = SECRET) -> dict[str, str]:
    mac = hmac.new(secret.encode(), b"v0:" + str(stamp).encode() + b":" + body, hashlib.sha256).hexdigest()
    return {"X-Slack-Request-Timestamp": str(stamp), "X-Slack-Signature": f"v0={mac}"}


def test_slacks_own_example_holds() -> None:
    verify_slack_request(SECRET, {"X-Slack-Request-Timestamp": EXAMPLE_STAMP, "X-Slack-Signature": EXAMPLE_SIGNATURE}, EXAMPLE_BODY,
                         now=int(EXAMPLE_STAMP) + 60)


@pytest.mark.parametrize(("headers", "body", "kind"), [
    (signed(b"payload=x", 1000, secret="another secret"), b"payload=x", "slack_signature"),
    (signed(b"payload=x", 1000), b"payload=y", "slack_signature"),
    ({**signed(b"payload=x", 1000), "X-Slack-Signature": ""}, b"payload=x", "slack_signature"),
    (signed(b"payload=x", 1000 - 301), b"payload=x", "slack_timestamp"),
    (signed(b"payload=x", 1000 + 301), b"payload=x", "slack_timestamp"),
    ({"X-Slack-Signature": signed(b"payload=x", 1000)["X-Slack-Signature"]}, b"payload=x", "slack_timestamp"),
])
def test_a_body_slack_did_not_sign_or_signed_more_than_five_minutes_from_now_is_refused(headers: dict[str, str], body: bytes, kind: str) -> None:
    with pytest.raises(SlackRefused) as caught:
        verify_slack_request(SECRET, headers, body, now=1000)
    assert caught.value.kind == kind


def interaction(action_id: str, value: str = "TOKEN", user: str = "U024BE7LH") -> bytes:
    payload = {"type": "block_actions", "user": {"id": user, "username": "alice"}, "team": {"id": "T1"},
               "actions": [{"action_id": action_id, "block_id": "sentinel_heal_approval", "value": value, "type": "button"}]}
    return urlencode({"payload": json.dumps(payload)}).encode()


def test_the_buttons_of_a_waiting_plan_are_read_and_anything_else_is_not_a_decision() -> None:
    approve, deny, opened = (slack_action(interaction(name)) for name in ("sentinel_heal_approve", "sentinel_heal_deny", "sentinel_heal_open"))
    assert approve is not None and (approve.user_id, approve.decision, approve.token) == ("U024BE7LH", "approved", "TOKEN")
    assert deny is not None and deny.decision == "denied" and opened is not None and opened.decision == ""
    for body in (interaction("some_other_app_button"), b"payload=not json", b"payload=%7B%22type%22%3A%22view_submission%22%7D", b""):
        assert slack_action(body) is None
