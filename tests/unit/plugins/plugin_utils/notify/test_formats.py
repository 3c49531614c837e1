"""Each destination's message: its documented structure, and host text escaped as data."""

from __future__ import annotations

import json
from pathlib import Path

import jsonschema
import pytest
from notify_cases import outcome, stored_plan

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import FleetIncident
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.destinations import destinations_from
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.formats import markdown_escaped, mrkdwn_escaped, payload
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.links import LinkClaim, LinkSigner, TokenKey, read_link
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.messages import (
    MAX_SUMMARY,
    denied_notice,
    fleet_notice,
    notices_of,
    with_approvals,
)

ROOT = Path(__file__).resolve().parents[5]
SCHEMA = json.loads((ROOT / "docs" / "notify-schema.json").read_text())
HOSTILE = "<script>alert(1)</script> *bold* _it_ `code` <!channel> <https://evil.example|click> & [x](https://evil.example)"


def _destination(kind: str):
    entry = {"type": kind, "routing_key": "R0UTINGKEY0123456789"} if kind == "pagerduty" else {"type": kind, "url": "https://hooks.example/x"}
    return destinations_from([entry])[0]


def _escalated(**given):
    return notices_of([outcome("escalated", **given)], approval_ttl=3600, now=1000.0)[0]


def test_slack_is_block_kit_with_mrkdwn_sections_and_escaped_host_text() -> None:
    message = payload(_escalated(summary=HOSTILE), _destination("slack"))
    assert message["blocks"][0]["type"] == "header" and message["blocks"][0]["text"]["type"] == "plain_text"
    sections = [block for block in message["blocks"] if block["type"] == "section"]
    assert sections and all(block["text"]["type"] == "mrkdwn" and len(block["text"]["text"]) <= 3000 for block in sections)
    text = json.dumps(message)
    assert "<script>" not in text and "<!channel>" not in text and "<https://evil" not in text
    assert "&lt;script&gt;" in text and "&amp;" in text
    assert message["blocks"][-1]["type"] == "context"


def test_mrkdwn_escapes_slacks_three_characters() -> None:
    assert mrkdwn_escaped("a & <b> c") == "a &amp; &lt;b&gt; c"


def test_markdown_escaping_marks_nothing_up() -> None:
    escaped = markdown_escaped("*bold* _it_ [x](y) <b> `c` # h")
    assert "<" not in escaped and all(f"\\{char}" in escaped for char in "*_[]()`#")


def test_teams_is_an_adaptive_card_in_a_message() -> None:
    message = payload(_escalated(summary=HOSTILE), _destination("teams"))
    assert message["type"] == "message"
    [attachment] = message["attachments"]
    assert attachment["contentType"] == "application/vnd.microsoft.card.adaptive"
    card = attachment["content"]
    assert (card["type"], card["version"]) == ("AdaptiveCard", "1.4")
    assert {block["type"] for block in card["body"]} <= {"TextBlock", "FactSet"}
    facts = next(block for block in card["body"] if block["type"] == "FactSet")["facts"]
    assert {"title": "Host", "value": "web1"} in facts
    assert "<script>" not in json.dumps(card) and "\\\\*bold\\\\*" in json.dumps(card)


def test_mattermost_has_attachments_with_fields() -> None:
    message = payload(_escalated(summary=HOSTILE), _destination("mattermost"))
    [attachment] = message["attachments"]
    assert attachment["fields"] and attachment["color"].startswith("#") and "<script>" not in json.dumps(message)


@pytest.mark.parametrize(("status", "action"), [("escalated", "trigger"), ("awaiting_approval", "trigger")])
def test_pagerduty_triggers_with_the_required_fields(status: str, action: str) -> None:
    notice = notices_of([outcome(status)], approval_ttl=3600, now=1000.0)[0]
    event = payload(notice, _destination("pagerduty"))
    assert event["routing_key"] == "R0UTINGKEY0123456789" and event["event_action"] == action
    assert event["dedup_key"].startswith("sentinel.heal/web1/nginx/")
    assert event["payload"]["source"] == "web1" and event["payload"]["component"] == "nginx"
    assert event["payload"]["severity"] in ("critical", "error", "warning", "info") and 0 < len(event["payload"]["summary"]) <= 1024


def test_pagerduty_resolves_a_heal_and_acknowledges_an_approval_under_the_same_key() -> None:
    escalated = payload(_escalated(), _destination("pagerduty"))
    approved, resolved = notices_of([outcome("healed", attempts=2, approved_by="alice")], approval_ttl=3600, now=1.0)
    assert (approved.event, resolved.event) == ("approved", "resolved")
    ack, resolve = payload(approved, _destination("pagerduty")), payload(resolved, _destination("pagerduty"))
    assert (ack["event_action"], resolve["event_action"]) == ("acknowledge", "resolve")
    assert escalated["dedup_key"] == ack["dedup_key"] == resolve["dedup_key"]


def test_pagerduty_acknowledges_a_denial_under_the_incidents_key_and_chat_says_who_and_why() -> None:
    waiting = payload(notices_of([outcome("awaiting_approval")], approval_ttl=3600, now=1.0)[0], _destination("pagerduty"))
    denied = denied_notice(stored_plan(), by="bob", note="not <!channel> during the sale", now=2.0)
    expected = {"routing_key": "R0UTINGKEY0123456789", "event_action": "acknowledge", "dedup_key": waiting["dedup_key"]}
    assert payload(denied, _destination("pagerduty")) == expected
    slack = payload(denied, _destination("slack"))
    assert slack["text"] == "nginx on web1: plan plan-7 denied by bob: not &lt;!channel&gt; during the sale"
    facts = {fact.label: fact.text for fact in denied.facts}
    assert facts["Why"] == "not <!channel> during the sale" and facts["Denied"] == "service nginx start" and "<!channel>" not in json.dumps(slack)


def test_a_summary_is_cut_to_pagerdutys_limit() -> None:
    notice = _escalated(reason="x" * 5000)
    assert len(payload(notice, _destination("pagerduty"))["payload"]["summary"]) == MAX_SUMMARY


def test_every_webhook_message_validates_against_the_documented_schema() -> None:
    fleet = FleetIncident(id=3, signature="s", service="nginx", failure_class="not_running", summary="nginx is not running",
                          hosts=tuple(f"web{n}" for n in range(100)), first_seen=1.0, last_seen=2.0, common=("the same address 10.0.0.9:53",))
    notices = [*notices_of([outcome("escalated"), outcome("awaiting_approval"), outcome("healed", attempts=2, approved_by="alice")],
                           approval_ttl=3600, now=1.0), fleet_notice(fleet, opened=True, now=1.0), fleet_notice(fleet, opened=False, now=2.0),
               denied_notice(stored_plan(), by="bob", note="", now=3.0)]
    validator = jsonschema.Draft202012Validator(SCHEMA)
    for notice in notices:
        validator.validate(payload(notice, _destination("webhook")))
    assert {notice.event for notice in notices} == {"escalated", "awaiting_approval", "approved", "resolved", "fleet_opened", "fleet_closed",
                                                    "denied"}
    assert set(SCHEMA["properties"]["event"]["enum"]) >= {notice.event for notice in notices}
    assert [payload(notice, _destination("webhook"))["decided_by"] for notice in notices if notice.event in ("approved", "resolved", "denied")] == [
        "alice", "alice", "bob"]


def test_an_escalation_says_the_cause_what_was_tried_what_changed_and_what_next() -> None:
    changes = {"changes": {"files": [{"path": "/etc/nginx/nginx.conf", "change": "modified", "diff": "-a\n+b\n"}], "packages": []}}
    notice = _escalated(evidence=changes, attempts=2, reason="the budget of 2 attempts is spent")
    facts = {fact.label: fact.text for fact in notice.facts}
    assert facts["Why"] == "the budget of 2 attempts is spent"
    assert "attempt 1: service nginx start" in facts["Tried"] and "attempt 2" in facts["Tried"]
    assert "/etc/nginx/nginx.conf" in facts["Changed"] and facts["Next"]


def test_a_waiting_plan_says_its_argv_and_expiry() -> None:
    notice = notices_of([outcome("awaiting_approval")], approval_ttl=3600, now=1000.0)[0]
    assert notice.steps == (("service", "nginx", "start"),) and notice.expires_at == 4600.0
    assert "plan_id=plan-7" in {fact.label: fact.text for fact in notice.facts}["Next"]


def test_a_first_try_heal_is_healed_and_a_later_one_resolved() -> None:
    [first] = notices_of([outcome("healed")], approval_ttl=1, now=1.0)
    [later] = notices_of([outcome("healed", attempts=2)], approval_ttl=1, now=1.0)
    assert (first.event, later.event) == ("healed", "resolved")
    assert notices_of([outcome("silenced")], approval_ttl=1, now=1.0) == []


SIGNER = LinkSigner(base_url="https://approvals.example.com", key=TokenKey("k" * 40))
WAITING_ROW = {"plan_id": "plan-7", "plan_hash": "ab" * 32, "host": "web1", "expires_at": 4600.0, "status": "pending"}


def _offered(kept_out: frozenset[str] = frozenset(), row: dict[str, object] | None = None):
    waiting = outcome("awaiting_approval")
    [notice] = with_approvals(notices_of([waiting], approval_ttl=3600, now=1000.0), [waiting], signer=SIGNER,
                              approvable_from_chat=lambda rule: rule not in kept_out, plan=lambda plan_id: row or WAITING_ROW)
    return notice


def test_a_waiting_plans_message_links_its_signed_approval_page_in_every_format() -> None:
    notice = _offered()
    assert notice.approval is not None and read_link(SIGNER.key, notice.approval.token, now=0) == LinkClaim("plan-7", "ab" * 32, "web1", 4600)
    url = notice.approval.url
    slack = payload(notice, _destination("slack"))
    [actions] = [block for block in slack["blocks"] if block["type"] == "actions"]
    # a destination that is not interactive gets no button that decides: the link opens the page, which asks who
    assert [(button["action_id"], button.get("url")) for button in actions["elements"]] == [("sentinel_heal_open", url)]
    interactive = payload(notice, destinations_from([{"type": "slack", "url": "https://hooks.example/x", "interactive": True}])[0])
    [actions] = [block for block in interactive["blocks"] if block["type"] == "actions"]
    assert [(button["action_id"], button.get("value")) for button in actions["elements"]] == [
        ("sentinel_heal_approve", notice.approval.token), ("sentinel_heal_deny", notice.approval.token), ("sentinel_heal_open", None)]
    assert payload(notice, _destination("teams"))["attachments"][0]["content"]["actions"] == [
        {"type": "Action.OpenUrl", "title": "Review and decide", "url": url}]
    assert payload(notice, _destination("mattermost"))["attachments"][0]["title_link"] == url
    assert payload(notice, _destination("pagerduty"))["links"] == [{"href": url, "text": "Review and decide"}]
    webhook = payload(notice, _destination("webhook"))
    jsonschema.Draft202012Validator(SCHEMA).validate(webhook)
    assert webhook["approval_url"] == url and webhook["expires_at"] == 4600.0


def test_a_plan_the_policy_keeps_out_of_chat_gets_no_link_and_names_approve_yml() -> None:
    notice = _offered(kept_out=frozenset({"rule"}))
    assert notice.approval is None
    facts = {fact.label: fact.text for fact in notice.facts}
    assert "approve.yml only" in facts["Not from chat"] and "service nginx start (rule: the policy says so)" in facts["Not from chat"]
    assert "sentinel.heal.approve -e plan_id=plan-7" in facts["Next"]
    assert all(block["type"] != "actions" for block in payload(notice, _destination("slack"))["blocks"])
    assert payload(notice, _destination("webhook"))["approval_url"] is None


def test_a_plan_that_no_longer_waits_or_with_no_page_configured_gets_no_link() -> None:
    assert _offered(row={**WAITING_ROW, "status": "running"}).approval is None
    waiting = outcome("awaiting_approval")
    [notice] = with_approvals(notices_of([waiting], approval_ttl=3600, now=1000.0), [waiting], signer=None,
                              approvable_from_chat=lambda rule: True, plan=lambda plan_id: WAITING_ROW)
    assert notice.approval is None and "Not from chat" not in {fact.label for fact in notice.facts}


def test_only_slack_has_buttons_that_decide() -> None:
    with pytest.raises(ConfigError, match="only for slack"):
        destinations_from([{"type": "teams", "url": "https://hooks.example/x", "interactive": True}])
