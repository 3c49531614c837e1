"""The approval page served by the real event source on a loopback port, driven by real HTTP requests, over a real
SQLite memory with a plan that waits: a look decides nothing, however often; a listed approver's decision is one event,
once; everything else is refused with an HTTP error that says why, and recorded."""

from __future__ import annotations

import logging
import time
from html import escape
from pathlib import Path

import pytest
import yaml
from approval_page_server import (
    ALICE_TOKEN,
    APPROVERS,
    LINK_SECRET,
    RESTORED,
    SOURCE,
    Page,
    link,
    serving,
    slack_click,
    waiting_plan,
)

from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.approval_page import ApprovalDesk, approval_desk
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.approvers import Approvers
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.options import APPROVAL_PAGE_OPTIONS
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import ConfigError
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.links import SECRET_ENVIRONMENT, LinkClaim, TokenKey
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.approval_requests import ApprovalRequest, ApprovalRequests
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory


def _requests(page: Page) -> list[ApprovalRequest]:
    with page.memory() as memory:
        return ApprovalRequests(memory.database).between(0, time.time() + 1)


def _status(page: Page, plan_id: str) -> str:
    with page.memory() as memory:
        row = memory.plan(plan_id)
    assert row is not None
    return str(row["status"])


def test_a_look_at_the_page_shows_the_plan_and_decides_nothing_however_often(tmp_path: Path) -> None:
    with serving(tmp_path) as page:
        with page.memory() as memory:
            # the host's diff of what changed since the service last worked: a typo; the restore puts the good line back
            plan_id, claim = waiting_plan(memory, diff="@@ -1 +1 @@\n-    server_name example.org;\n+    server_nmae example.org;\n")
        for _look in range(6):  # a chat client's preview, the person, the person again...
            shown = page.get(link(claim))
            assert shown.status == 200
        assert page.events == [] and _status(page, plan_id) == "pending" and _requests(page) == []
    html = shown.body
    for said in (plan_id, "web1", "nginx", "rm -f /run/nginx.pid", "service nginx start", f"sentinel-heal-restore {RESTORED}", "default-approve",
                 f"Puts back <code>{RESTORED}</code>", "-    server_nmae example.org;\n+    server_name example.org;",
                 "Expires", "UTC", 'value="approved"', 'value="denied"'):
        assert said in html, said
    assert shown.form_field("t") == link(claim) and shown.form_field("page")
    assert "default-src 'none'" in shown.headers["Content-Security-Policy"] and shown.headers["Referrer-Policy"] == "no-referrer"
    assert shown.headers["X-Frame-Options"] == "DENY" and shown.headers["Cache-Control"] == "no-store" and "<script" not in html


def test_the_pages_form_approves_once_as_one_event_and_a_second_post_is_refused_naming_who_decided(tmp_path: Path) -> None:
    with serving(tmp_path) as page:
        with page.memory() as memory:
            plan_id, claim = waiting_plan(memory)
        shown = page.get(link(claim))
        form = {"t": link(claim), "page": shown.form_field("page"), "decision": "approved", "token": ALICE_TOKEN}
        first = page.post(form)
        again = page.post(form)
        # a later look says the same, and offers no form: the link decided its plan
        later = page.get(link(claim))
        events = list(page.events)
    assert first.status == 200 and "approved by alice via page" in first.body
    assert events == [{"sentinel": {"approval": {"plan_id": plan_id, "decision": "approved", "approver": "alice", "via": "page"}},
                       "meta": {"hosts": ["localhost", "web1"]}}]
    assert again.status == 409 and f"plan {plan_id} was approved by alice at" in again.body
    assert later.status == 409 and f"plan {plan_id} was approved by alice at" in later.body and 'name="page"' not in later.body
    assert [(request.outcome, request.refusal, request.approver, request.decision) for request in _requests(page)] == [
        ("accepted", "", "alice", "approved"), ("refused", "used", "alice", "approved"), ("refused", "used", "", "")]


def test_a_denial_is_one_event_and_a_plan_decided_elsewhere_is_refused_by_its_link(tmp_path: Path) -> None:
    with serving(tmp_path) as page:
        with page.memory() as memory:
            denied_id, denied = waiting_plan(memory)
            decided_id, decided = waiting_plan(memory)
            assert memory.claim_plan(decided_id, by="bob", at=time.time())
        assert page.decide(link(denied), "denied").status == 200
        elsewhere = page.get(link(decided))
        events = list(page.events)
    assert events == [{"sentinel": {"approval": {"plan_id": denied_id, "decision": "denied", "approver": "alice", "via": "page"}},
                       "meta": {"hosts": ["localhost", "web1"]}}]
    assert elsewhere.status == 409 and f"plan {decided_id} was approved, and is running, by bob at" in elsewhere.body


def _forge(page: Page, claim: LinkClaim, other: LinkClaim, case: str) -> tuple[int, str, str]:
    """One way to ask for a decision that must not be taken; the answer's status and text, and the refusal recorded."""
    forms = {
        "forged link": lambda: page.post({"t": link(claim, secret="not the secret the heal jobs sign with!!"), "page": "x",
                                          "decision": "approved", "token": ALICE_TOKEN}),
        "forged page": lambda: page.post({"t": link(claim), "page": page.get(link(claim)).form_field("page")[:-4] + "AAAA",
                                          "decision": "approved", "token": ALICE_TOKEN}),
        "no page": lambda: page.post({"t": link(claim), "decision": "approved", "token": ALICE_TOKEN}),
        # a link that does not hold is refused at the look: no page, so no form to send (a form without one is forged, above)
        "expired link": lambda: page.get(link(LinkClaim(claim.plan_id, claim.plan_hash, claim.host, int(time.time()) - 1))),
        "another plan's hash": lambda: page.get(link(LinkClaim(claim.plan_id, other.plan_hash, claim.host, claim.expires_at))),
        "another host": lambda: page.get(link(LinkClaim(claim.plan_id, claim.plan_hash, "db1", claim.expires_at))),
        "another plan's page": lambda: page.post({"t": link(claim), "page": page.get(link(other)).form_field("page"), "decision": "approved",
                                                  "token": ALICE_TOKEN}),
        "unlisted approver": lambda: page.decide(link(claim), personal="mallory-personal-token-0123456789"),
        "no decision": lambda: page.post({"t": link(claim), "page": page.get(link(claim)).form_field("page"), "decision": "maybe",
                                          "token": ALICE_TOKEN}),
    }
    before = len(_requests(page))
    reply = forms[case]()
    recorded = _requests(page)[before:]
    return reply.status, reply.body, recorded[-1].refusal if recorded else "(not recorded)"


@pytest.mark.parametrize(("case", "status", "said", "refusal"), [
    ("forged link", 403, "not signed by this service", "forged"),
    ("forged page", 403, "anti-forgery token does not hold", "forged"),
    ("no page", 403, "anti-forgery token does not hold", "forged"),
    ("expired link", 410, "the link expired at", "expired"),
    ("another plan's hash", 403, "made for another plan", "other_plan"),
    ("another host", 403, "made for another plan", "other_plan"),
    ("another plan's page", 403, "made for another plan", "other_plan"),
    ("unlisted approver", 403, "no listed approver", "unlisted"),
    ("no decision", 400, "neither approved nor denied", "bad_request"),
])
def test_a_forged_expired_other_plans_or_unlisted_decision_is_refused_recorded_and_decides_nothing(
        tmp_path: Path, case: str, status: int, said: str, refusal: str) -> None:
    with serving(tmp_path) as page:
        with page.memory() as memory:
            plan_id, claim = waiting_plan(memory)
            # another plan: other steps, so another hash
            _other_id, other = waiting_plan(memory, diff="@@ -1 +1 @@\n-listen 80;\n+listen 8O;\n")
        answer, body, recorded = _forge(page, claim, other, case)
        assert (answer, recorded) == (status, refusal) and said in body
        assert page.events == [] and _status(page, plan_id) == "pending"
        # and the plan can still be decided by its own link
        assert page.decide(link(claim)).status == 200 and len(page.settled_events(1)) == 1


def test_an_expired_plan_is_refused_though_its_link_was_signed_to_last_longer(tmp_path: Path) -> None:
    with serving(tmp_path) as page:
        with page.memory() as memory:
            plan_id, claim = waiting_plan(memory, ttl=-5)
        late = page.get(link(LinkClaim(plan_id, claim.plan_hash, claim.host, int(time.time()) + 600)))
        slack = page.slack(slack_click("sentinel_heal_approve", link(LinkClaim(plan_id, claim.plan_hash, claim.host, int(time.time()) + 600))))
        assert late.status == 410 and f"plan {plan_id} expired at" in late.body and page.events == []
        assert slack.status == 410 and [request.refusal for request in _requests(page)] == ["expired", "expired"]


def test_slacks_buttons_decide_for_a_listed_user_once_and_anything_slack_did_not_sign_lately_is_refused(tmp_path: Path) -> None:
    with serving(tmp_path) as page:
        with page.memory() as memory:
            plan_id, claim = waiting_plan(memory)
        click = slack_click("sentinel_heal_approve", link(claim))
        refused = {
            "bad signature": page.slack(click, secret="not the app's signing secret"),
            "old timestamp": page.slack(click, stamp=int(time.time()) - 301),
            "unlisted user": page.slack(slack_click("sentinel_heal_approve", link(claim), user="U0MALLORY")),
            "forged link": page.slack(slack_click("sentinel_heal_approve", link(claim, secret="not the secret the heal jobs sign with!!"))),
        }
        assert page.events == [] and _status(page, plan_id) == "pending"
        opened = page.slack(slack_click("sentinel_heal_open", ""))
        first = page.slack(click)
        retried = page.slack(click)  # Slack, or a person, again
        other_person = page.slack(slack_click("sentinel_heal_deny", link(claim), user="U0CAROL1"))
        events = list(page.events)
    assert {name: reply.status for name, reply in refused.items()} == {"bad signature": 401, "old timestamp": 401, "unlisted user": 403,
                                                                       "forged link": 403}
    assert '"slack_signature"' in refused["bad signature"].body and "more than 300 s" in refused["old timestamp"].body
    assert "Slack user U0MALLORY is no listed approver" in refused["unlisted user"].body
    assert opened.status == 200 and first.status == 200 and (retried.status, other_person.status) == (409, 409)
    assert events == [{"sentinel": {"approval": {"plan_id": plan_id, "decision": "approved", "approver": "alice", "via": "slack"}},
                       "meta": {"hosts": ["localhost", "web1"]}}]
    records = _requests(page)
    assert [(request.refusal, request.claimed_by) for request in records] == [
        ("slack_signature", ""), ("slack_timestamp", ""), ("unlisted", "U0MALLORY"), ("forged", "U0ALICE1"), ("", "U0ALICE1"),
        ("used", "U0ALICE1"), ("used", "U0CAROL1")]
    assert records[4].via == "slack" and records[4].approver == "alice" and records[4].plan_id == plan_id


def test_a_slack_request_is_refused_when_the_page_has_no_signing_secret(tmp_path: Path) -> None:
    with serving(tmp_path, slack_signing_secret="") as page:
        with page.memory() as memory:
            _plan_id, claim = waiting_plan(memory)
        reply = page.slack(slack_click("sentinel_heal_approve", link(claim)))
        assert reply.status == 401 and "no Slack signing secret" in reply.body and page.events == []


def test_host_and_model_text_on_the_page_is_escaped_as_data(tmp_path: Path) -> None:
    hostile = '<script>alert(1)</script> "><img src=x onerror=alert(2)> &amp; <!-- '
    with serving(tmp_path) as page:
        with page.memory() as memory:
            _plan_id, claim = waiting_plan(memory, summary=f"nginx failed: {hostile}", rationale=f"the model says {hostile}",
                                           diff=f"@@ -1 +1 @@\n-{hostile}\n+server_name example.org;\n")
        html = page.get(link(claim)).body
    assert "<script" not in html and "<img" not in html and "<!-- " not in html
    assert html.count(escape(hostile, quote=True)) == 3  # the failure, the rationale, the diff (read the other way: +)


def test_a_refusal_the_memory_cannot_take_is_in_the_sources_log(tmp_path: Path, caplog: pytest.LogCaptureFixture) -> None:
    memory = Memory(tmp_path)
    _plan_id, claim = waiting_plan(memory)
    desk = ApprovalDesk(memory, TokenKey(LINK_SECRET), Approvers.from_option([]))
    memory.close()  # the memory gone (a server down, a disk failing)
    with caplog.at_level(logging.WARNING, logger="sentinel.heal.approval_page"):
        answer = desk.show(link(claim), "10.0.0.7")
    assert answer.status == 503 and answer.event is None and "nothing was decided" in answer.body
    assert any("the refusal is not in the memory" in record.message and '"refusal": "unavailable"' in record.message for record in caplog.records)


def test_a_page_left_open_longer_than_its_form_lasts_decides_nothing_until_it_is_loaded_again(tmp_path: Path) -> None:
    memory = Memory(tmp_path)
    _plan_id, claim = waiting_plan(memory)
    now = [time.time()]
    desk = ApprovalDesk(memory, TokenKey(LINK_SECRET), Approvers.from_option(APPROVERS), clock=lambda: now[0])
    shown = desk.show(link(claim))
    page_token = shown.body.split('name="page" value="')[1].split('"')[0]
    now[0] += 31 * 60
    stale = desk.decide({"t": link(claim), "page": page_token, "decision": "approved", "token": ALICE_TOKEN})
    assert (stale.status, stale.event) == (410, None) and "loaded more than 30 min ago" in stale.body
    fresh = desk.show(link(claim)).body.split('name="page" value="')[1].split('"')[0]
    assert desk.decide({"t": link(claim), "page": fresh, "decision": "approved", "token": ALICE_TOKEN}).event is not None
    memory.close()


def test_the_sources_documentation_says_exactly_its_options(tmp_path: Path) -> None:
    documented = yaml.safe_load(SOURCE.read_text().split('DOCUMENTATION = r"""', 1)[1].split('"""', 1)[0])["options"]
    assert sorted(documented) == sorted(APPROVAL_PAGE_OPTIONS)
    for name, spec in APPROVAL_PAGE_OPTIONS.items():
        doc = documented[name]
        assert (doc.get("type", "str"), bool(doc.get("required")), doc.get("default")) == (
            spec.get("type", "str"), bool(spec.get("required")), spec.get("default")), name
    assert sorted(documented["approvers"]["suboptions"]) == sorted(APPROVAL_PAGE_OPTIONS["approvers"]["options"])


def test_a_page_without_the_link_secret_does_not_start(tmp_path: Path) -> None:
    with pytest.raises(ConfigError) as caught:
        approval_desk({"inventory": str(tmp_path / "none.yml"), "link_secret": "", "approvers": []}, environ={})
    assert caught.value.field == "link_secret" and SECRET_ENVIRONMENT in str(caught.value)
