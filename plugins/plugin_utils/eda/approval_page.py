# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The approval page's logic (the ``sentinel.heal.approval_page`` event source serves it): a waiting plan shown from its
signed link, and a listed approver's decision turned into one event for the rulebook, which runs approve.yml for
exactly that plan.

A look decides nothing - chat clients fetch links to preview them. A decision (the page's form, or a Slack button)
holds only when the link's signature holds and it has not expired, the form is this page's (its anti-forgery token,
signed for the link it was shown for), the approver is listed, and the plan still waits with the very hash the link
names, undecided here and elsewhere. The memory takes at most one decision per plan (store/approval_requests.py):
a second click, a retry or a replay is refused, never a second event. Each refusal is an HTTP error that says why,
and a record in the memory (the source's log when the memory cannot take it), as each decision taken is."""

from __future__ import annotations

import hashlib
import json
import logging
import os
import secrets
import time
from dataclasses import dataclass, field
from typing import Any, Callable, Mapping

from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.approval_html import HEADERS, plan_page, status_page, when
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.approvers import Approver, Approvers
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.fleet import read_fleet
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.slack import SlackRefused, slack_action, verify_slack_request
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError, MemoryStoreError, SentinelError
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.approvals import StoredPlan
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.links import (
    SECRET_ENVIRONMENT,
    LinkClaim,
    LinkRefused,
    TokenKey,
    link_secret,
    read_link,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.approval_requests import ApprovalRequest, ApprovalRequests
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory

logger = logging.getLogger("sentinel.heal.approval_page")
PAGE_PURPOSE = "approval page"
# how long a shown page's form may be sent: long enough to read a plan, short enough that a copy of it is of no use
PAGE_TTL_S = 1800
DECISIONS = ("approved", "denied")
STATUS = {"forged": 403, "expired": 410, "other_plan": 403, "used": 409, "unlisted": 403, "slack_signature": 401, "slack_timestamp": 401,
          "no_plan": 404, "bad_request": 400, "unavailable": 503}


class Refused(SentinelError):
    """A request the page does not take: ``kind`` (store/approval_requests.py REFUSALS) says why, ``status`` is its HTTP
    answer; the rest is what the record names."""

    def __init__(self, message: str, *, kind: str, claim: LinkClaim | None = None, approver: str = "", hint: str | None = None) -> None:
        self.kind, self.status, self.claim, self.approver = kind, STATUS[kind], claim, approver
        super().__init__(message, field="t" if claim is None else "plan_id", value=claim.plan_id if claim else None, hint=hint)


@dataclass(frozen=True)
class Answer:
    """What the server sends back: ``event``, when a decision was taken, goes on the rulebook's queue."""

    status: int
    body: str
    content_type: str = "text/html"
    event: Mapping[str, Any] | None = None
    headers: Mapping[str, str] = field(default_factory=lambda: dict(HEADERS))


class ApprovalDesk:
    """Shows waiting plans and takes the decisions of listed approvers, over the memory the heal jobs share."""

    def __init__(self, memory: Memory, key: TokenKey, approvers: Approvers, slack_signing_secret: str = "", *,
                 clock: Callable[[], float] = time.time) -> None:
        self.memory, self.key, self.approvers, self.clock = memory, key, approvers, clock
        self.requests = ApprovalRequests(memory.database)
        self._slack_secret = slack_signing_secret

    def show(self, link_token: str, remote: str = "") -> Answer:
        """GET: the plan the link names, with a fresh form; never a decision."""
        now = self.clock()
        try:
            claim = self._claim(link_token, now)
            stored, verdicts = self._waiting(claim, now)
        except Refused as refused:
            return self._refusal(refused, "page", remote, decision="")
        page = self.key.seal(PAGE_PURPOSE, {"l": _digest(link_token), "i": int(now), "n": secrets.token_hex(8)})
        return Answer(200, plan_page(stored.summary(), verdicts, link_token=link_token, page_token=page, now=now))

    def decide(self, form: Mapping[str, str], remote: str = "") -> Answer:
        """POST of the page's form: the link, the page's token, the decision, the approver's personal token."""
        now, decision = self.clock(), str(form.get("decision") or "")
        claim = None
        try:
            claim = self._claim(str(form.get("t") or ""), now)
            self._check_page(str(form.get("page") or ""), str(form.get("t")), claim, now)
            if decision not in DECISIONS:
                raise Refused("the form says neither approved nor denied", kind="bad_request", claim=claim)
            approver = self.approvers.by_token(str(form.get("token") or ""))
            if approver is None:
                raise Refused("that token is no listed approver's: nothing was decided", kind="unlisted", claim=claim,
                              hint="your personal token, whose SHA-256 the page's approvers list under your name")
            return self._take(claim, decision, approver, "page", remote, "", now)
        except Refused as refused:
            return self._refusal(refused, "page", remote, decision=decision if decision in DECISIONS else "")

    def slack(self, headers: Mapping[str, str], body: bytes, remote: str = "") -> Answer:
        """POST of a Slack button: Slack's signature first, then the link its value carries and the Slack user."""
        now = self.clock()
        try:
            if not self._slack_secret:
                raise SlackRefused("this approval page has no Slack signing secret: Slack's requests are refused", "slack_signature")
            verify_slack_request(self._slack_secret, headers, body, now=now)
        except SlackRefused as refused:
            return self._refusal(Refused(refused.message, kind=refused.kind, hint=refused.hint), "slack", remote, decision="")
        action = slack_action(body)
        if action is None or not action.decision:
            # the link button (Slack tells the app it was pressed), or an interaction not of a waiting plan: nothing to decide
            return _json(200, {"text": "nothing to decide"})
        try:
            claim = self._claim(action.token, now)
            approver = self.approvers.by_slack_user(action.user_id)
            if approver is None:
                raise Refused(f"Slack user {action.user_id} is no listed approver: nothing was decided", kind="unlisted", claim=claim,
                              hint="the page's approvers list names who may decide, by their Slack user id")
            return self._take(claim, action.decision, approver, "slack", remote, action.user_id, now)
        except Refused as refused:
            return self._refusal(refused, "slack", remote, decision=action.decision, claimed_by=action.user_id)

    def _claim(self, link_token: str, now: float) -> LinkClaim:
        try:
            return read_link(self.key, link_token, now=now)
        except LinkRefused as refused:
            raise Refused(refused.message, kind=refused.kind, hint=refused.hint) from None

    def _check_page(self, page_token: str, link_token: str, claim: LinkClaim, now: float) -> None:
        try:
            shown = self.key.open(PAGE_PURPOSE, page_token)
        except LinkRefused:
            raise Refused("the form was not made by this page (its anti-forgery token does not hold)", kind="forged", claim=claim,
                          hint="open the link of the message, and decide on the page it shows") from None
        if shown.get("l") != _digest(link_token):
            raise Refused("the form was made for another plan's link", kind="other_plan", claim=claim, hint="decide on the plan's own page")
        if not isinstance(shown.get("i"), int) or now - shown["i"] > PAGE_TTL_S:
            raise Refused(f"the page was loaded more than {PAGE_TTL_S // 60} min ago", kind="expired", claim=claim,
                          hint="open the link again: the plan as it is now, with a fresh form")

    def _waiting(self, claim: LinkClaim, now: float) -> tuple[StoredPlan, list[Mapping[str, Any]]]:
        """The plan the link names, while it waits with the very hash and host the link was signed for."""
        unreadable: tuple[type[BaseException], ...] = (MemoryStoreError, *self.memory.database.errors)
        try:
            row = self.memory.plan(claim.plan_id)
            taken = self.requests.decision_of(claim.plan_id)
        except unreadable as exc:
            raise Refused(f"the memory cannot be read ({exc}): nothing was decided", kind="unavailable", claim=claim,
                          hint="try again, or ansible-playbook sentinel.heal.approve") from None
        where = f"plan {claim.plan_id}"
        if row is None:
            raise Refused(f"{where} is not in the memory (pruned, or stored in another)", kind="no_plan", claim=claim)
        if row["plan_hash"] != claim.plan_hash or row["host"] != claim.host:
            raise Refused(f"the link was made for another plan than {where} as the memory holds it", kind="other_plan", claim=claim,
                          hint="use the link of the plan's own message")
        if row["status"] != "pending":
            said = {"running": "approved, and is running", "executed": "approved, and was run", "denied": "denied"}.get(row["status"], row["status"])
            raise Refused(f"{where} was {said}, by {row['decided_by']} at {when(float(row['decided_at'] or 0), now)}", kind="used",
                          claim=claim, hint="a link decides its plan once")
        if taken is not None:
            raise Refused(f"{where} was {taken.decision} by {taken.approver} at {when(taken.at, now)} (via {taken.via}); the rulebook runs "
                          f"sentinel.heal.approve with that decision", kind="used", claim=claim,
                          hint="a link decides its plan once; if that run did not happen, decide with sentinel.heal.approve")
        if now > float(row["expires_at"]):
            raise Refused(f"{where} expired at {when(float(row['expires_at']), now)}", kind="expired", claim=claim,
                          hint="run heal again for a new plan")
        stored = StoredPlan.from_row(row)
        verdicts = json.loads(row["verdicts_json"] or "[]")
        return stored, [verdict for verdict in verdicts if isinstance(verdict, dict)]

    def _take(self, claim: LinkClaim, decision: str, approver: Approver, via: str, remote: str, claimed_by: str, now: float) -> Answer:
        """The decision, once: recorded as the plan's one decision here, then the event."""
        try:
            self._waiting(claim, now)
        except Refused as refused:
            refused.approver = approver.name
            raise
        said = f"plan {claim.plan_id} {decision} by {approver.name} via {via}: the rulebook runs sentinel.heal.approve for exactly this plan"
        request = ApprovalRequest(at=now, via=via, outcome="accepted", reason=said, plan_id=claim.plan_id, host=claim.host, decision=decision,
                                  approver=approver.name, claimed_by=claimed_by, remote=remote)
        try:
            taken = self.requests.accept(request)
        except MemoryStoreError as exc:
            raise Refused(f"the memory cannot record the decision ({exc.message}): nothing was decided", kind="unavailable", claim=claim,
                          approver=approver.name, hint="try again, or ansible-playbook sentinel.heal.approve") from None
        if taken is not None:
            raise Refused(f"plan {claim.plan_id} was {taken.decision} by {taken.approver} at {when(taken.at, now)} (via {taken.via})",
                          kind="used", claim=claim, approver=approver.name, hint="a link decides its plan once")
        logger.info("%s", said)
        # meta.hosts is the job's limit: approve.yml's first play is localhost's (the memory), its second the plan's host's
        event = {"sentinel": {"approval": {"plan_id": claim.plan_id, "decision": decision, "approver": approver.name, "via": via}},
                 "meta": {"hosts": ["localhost", claim.host]}}
        if via == "slack":
            return _json(200, {"text": said}, event=event)
        title = "Approved" if decision == "approved" else "Denied"
        return Answer(200, status_page(f"{title}: plan {claim.plan_id}", f"{said}. Its job's output and the memory say how it went.", status=200),
                      event=event)

    def _refusal(self, refused: Refused, via: str, remote: str, *, decision: str, claimed_by: str = "") -> Answer:
        """The refusal recorded (in the memory, else the source's log) and answered."""
        claim = refused.claim
        record = ApprovalRequest(at=self.clock(), via=via, outcome="refused", reason=refused.message, refusal=refused.kind,
                                 plan_id=claim.plan_id if claim else "", host=claim.host if claim else "", decision=decision,
                                 approver=refused.approver, claimed_by=claimed_by, remote=remote)
        logger.warning("refused a request via %s from %s: %s (%s)", via, remote or "?", refused.message, refused.kind)
        try:
            self.requests.refused(record)
        except MemoryStoreError as exc:
            logger.error("the refusal is not in the memory (%s): %s", exc.message, json.dumps(record.to_dict(), sort_keys=True))
        said = refused.message + (f"; {refused.hint}" if refused.hint else "")
        if via == "slack":
            return _json(refused.status, {"error": refused.kind, "text": said})
        title = "Refused: nothing was decided" if decision else "This link shows no plan"
        return Answer(refused.status, status_page(title, said, status=refused.status))


def _digest(link_token: str) -> str:
    """What a page's form names its link by."""
    return hashlib.sha256(link_token.encode("utf-8")).hexdigest()[:32]


def _json(status: int, body: Mapping[str, Any], *, event: Mapping[str, Any] | None = None) -> Answer:
    return Answer(status, json.dumps(body, sort_keys=True), content_type="application/json", event=event, headers={"Cache-Control": "no-store"})


def approval_desk(options: Mapping[str, Any], environ: Mapping[str, str] | None = None) -> ApprovalDesk:
    """The desk the source's options (eda/options.py APPROVAL_PAGE_OPTIONS) make: the memory the inventory's heal jobs
    share, the link key (the option, else SENTINEL_HEAL_APPROVAL_LINK_SECRET), the approvers, Slack's signing secret."""
    secret = link_secret(options.get("link_secret"), os.environ if environ is None else environ, field="link_secret")
    if not secret:
        raise ConfigError("the approval page needs the secret the heal jobs sign its links with", field="link_secret", value="(empty)",
                          hint=f"the heal's approval_link_secret (the role's autoheal_approval_link_secret), from a vault or {SECRET_ENVIRONMENT}")
    approvers = Approvers.from_option(options.get("approvers"))
    if not len(approvers):
        logger.warning("no approvers are listed: the page shows plans, and every decision is refused")
    memory = Memory.from_options(read_fleet(options["inventory"]).memory_options())
    return ApprovalDesk(memory, TokenKey(secret), approvers, str(options.get("slack_signing_secret") or ""))
