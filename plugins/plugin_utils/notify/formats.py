"""Each destination's message for a :class:`Notice`: Slack's Block Kit, Mattermost's attachments, a Teams workflow's
Adaptive Card, PagerDuty's Events API v2 and the plain webhook's JSON (docs/notify-schema.json).

Text a host or a model wrote is escaped for the format it lands in - Slack's mrkdwn (``&``, ``<``, ``>``: a ``<`` would
open a link or a mention), Mattermost's and Teams' Markdown (each character that marks text up), and shown as code
where it is code - so that it reads as data and never as a link, a mention or a formatting instruction. The one link a
message makes is a waiting plan's approval link (ours, signed): a button (Slack, Teams), a link (Mattermost, PagerDuty),
``approval_url`` (the webhook); Slack's Approve and Deny buttons, for a destination that is ``interactive``, carry its
token to the approval page's ``/slack/interactive``."""

from __future__ import annotations

import re
import time
from typing import Any, Callable

from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.destinations import Destination
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.links import SLACK_APPROVE, SLACK_DENY, SLACK_OPEN, ApprovalLink
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.messages import CLOSING, Notice, clip

# Slack's limit on a section's text
MAX_SLACK_SECTION = 3000
_MARKDOWN_SPECIAL = re.compile(r"([\\`*_{}\[\]()#+\-.!|~>])")
ICONS = {"escalated": ":rotating_light:", "awaiting_approval": ":raised_hand:", "fleet_opened": ":fire:", "approved": ":ballot_box_with_check:",
         "denied": ":no_entry:",
         "resolved": ":white_check_mark:", "healed": ":white_check_mark:", "fleet_closed": ":white_check_mark:"}
COLOURS = {"critical": "#b00020", "error": "#d9480f", "warning": "#f59f00", "info": "#2f9e44"}
REVIEW = "Review and decide"


def mrkdwn_escaped(text: str) -> str:
    """Slack's three control characters, as Slack says to escape them."""
    return text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")


def markdown_escaped(text: str) -> str:
    """Markdown (Mattermost, Teams' TextBlock): each character that could mark text up, backslashed; ``<`` and ``&`` as
    entities so no HTML is ever made of host text."""
    return _MARKDOWN_SPECIAL.sub(r"\\\1", text.replace("&", "&amp;").replace("<", "&lt;"))


def code_block(text: str) -> str:
    """Text shown as code: no run of backticks inside can close the block."""
    return "```\n" + text.replace("```", "`\u200b``") + "\n```"


def slack(notice: Notice, destination: Destination) -> dict[str, Any]:
    blocks: list[dict[str, Any]] = [
        {"type": "header", "text": {"type": "plain_text", "text": clip(f"sentinel.heal: {notice.event.replace('_', ' ')}", 150)}},
        {"type": "section", "text": {"type": "mrkdwn", "text": f"{ICONS[notice.event]} *{mrkdwn_escaped(notice.summary)}*"}},
    ]
    for fact in notice.facts:
        text = code_block(mrkdwn_escaped(fact.text)) if fact.code else mrkdwn_escaped(fact.text)
        blocks.append({"type": "section", "text": {"type": "mrkdwn", "text": clip(f"*{mrkdwn_escaped(fact.label)}*\n{text}", MAX_SLACK_SECTION)}})
    if notice.approval:
        blocks.append({"type": "actions", "block_id": "sentinel_heal_approval", "elements": _slack_buttons(notice.approval, notice, destination)})
    blocks.append({"type": "context", "elements": [{"type": "mrkdwn", "text": mrkdwn_escaped(_context(notice))}]})
    # text: what the notification and a client without blocks show
    return {"text": mrkdwn_escaped(notice.summary), "blocks": blocks}


def _slack_buttons(approval: ApprovalLink, notice: Notice, destination: Destination) -> list[dict[str, Any]]:
    review = {"type": "button", "action_id": SLACK_OPEN, "text": {"type": "plain_text", "text": REVIEW}, "url": approval.url}
    if not destination.interactive:
        return [review]
    where = clip(f"{notice.service} on {notice.host}", 200)
    confirm = {"title": {"type": "plain_text", "text": "Approve the plan?"}, "confirm": {"type": "plain_text", "text": "Approve"},
               "deny": {"type": "plain_text", "text": "Cancel"},
               "text": {"type": "plain_text", "text": f"Its steps run on {where}, as the message shows them."}}
    return [{"type": "button", "action_id": SLACK_APPROVE, "style": "primary", "text": {"type": "plain_text", "text": "Approve"},
             "value": approval.token, "confirm": confirm},
            {"type": "button", "action_id": SLACK_DENY, "style": "danger", "text": {"type": "plain_text", "text": "Deny"},
             "value": approval.token},
            review]


def mattermost(notice: Notice, destination: Destination) -> dict[str, Any]:
    fields = [{"short": False, "title": fact.label, "value": code_block(fact.text) if fact.code else markdown_escaped(fact.text)}
              for fact in notice.facts]
    attachment = {"fallback": markdown_escaped(notice.summary), "color": COLOURS[notice.severity],
                  "title": markdown_escaped(notice.summary), "fields": fields, "footer": _context(notice)}
    if notice.approval:
        fields.append({"short": False, "title": "Approve or deny", "value": f"[{REVIEW}]({notice.approval.url})"})
        attachment["title_link"] = notice.approval.url
    return {"username": "sentinel.heal", "text": markdown_escaped(notice.summary), "attachments": [attachment]}


def teams(notice: Notice, destination: Destination) -> dict[str, Any]:
    body: list[dict[str, Any]] = [
        {"type": "TextBlock", "size": "Medium", "weight": "Bolder", "wrap": True, "text": markdown_escaped(notice.summary),
         "color": "Good" if notice.event in CLOSING else "Attention" if notice.severity in ("critical", "error") else "Warning"},
        {"type": "FactSet", "facts": [{"title": "Host", "value": markdown_escaped(notice.host)},
                                      {"title": "Service", "value": markdown_escaped(notice.service)},
                                      {"title": "Event", "value": notice.event}]},
    ]
    for fact in notice.facts:
        body.append({"type": "TextBlock", "weight": "Bolder", "wrap": True, "spacing": "Medium", "text": markdown_escaped(fact.label)})
        # code in a monospace block: Adaptive Cards' TextBlock knows no code spans, only fontType
        body.append({"type": "TextBlock", "wrap": True, "text": markdown_escaped(fact.text), **({"fontType": "Monospace"} if fact.code else {})})
    body.append({"type": "TextBlock", "isSubtle": True, "size": "Small", "wrap": True, "text": markdown_escaped(_context(notice))})
    card: dict[str, Any] = {"$schema": "http://adaptivecards.io/schemas/adaptive-card.json", "type": "AdaptiveCard", "version": "1.4", "body": body}
    if notice.approval:
        card["actions"] = [{"type": "Action.OpenUrl", "title": REVIEW, "url": notice.approval.url}]
    return {"type": "message", "attachments": [{"contentType": "application/vnd.microsoft.card.adaptive", "contentUrl": None, "content": card}]}


def pagerduty(notice: Notice, destination: Destination) -> dict[str, Any]:
    # a person who approved or denied the plan took up the page its wait opened
    action = "resolve" if notice.event in CLOSING else "acknowledge" if notice.event in ("approved", "denied") else "trigger"
    event: dict[str, Any] = {"routing_key": destination.routing_key, "event_action": action, "dedup_key": notice.key}
    if action == "trigger":
        # PagerDuty shows these as text, escapes them itself, and limits only the summary
        event["payload"] = {"summary": notice.summary, "source": notice.host or "sentinel.heal", "severity": notice.severity,
                            "component": notice.service, "class": notice.event, "group": "sentinel.heal",
                            "custom_details": {fact.label: fact.text for fact in notice.facts}}
        if notice.hosts:
            event["payload"]["custom_details"]["hosts"] = list(notice.hosts)
        event["client"] = "sentinel.heal"
        if notice.approval:
            event["links"] = [{"href": notice.approval.url, "text": REVIEW}]
    return event


def webhook(notice: Notice, destination: Destination) -> dict[str, Any]:
    return notice.to_dict()


def _context(notice: Notice) -> str:
    parts = [f"incident {notice.incident_id}" if notice.incident_id else "", f"plan {notice.plan_id}" if notice.plan_id else "",
             f"fleet incident {notice.fleet_incident}" if notice.fleet_incident is not None else "",
             f"expires {_utc(notice.expires_at)}" if notice.expires_at else ""]
    return "sentinel.heal · " + " · ".join(part for part in parts if part)


def _utc(at: float) -> str:
    return time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime(at))


FORMATS: dict[str, Callable[[Notice, Destination], dict[str, Any]]] = {
    "slack": slack, "mattermost": mattermost, "teams": teams, "pagerduty": pagerduty, "webhook": webhook}


def payload(notice: Notice, destination: Destination) -> dict[str, Any]:
    return FORMATS[destination.type](notice, destination)
