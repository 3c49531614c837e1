# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""ansible-rulebook event source sentinel.heal.approval_page: a waiting plan shown from its signed link, and a listed
approver's decision - on the page, or with a Slack button - as one event."""

from __future__ import annotations

import asyncio
import logging
import sys
from pathlib import Path
from typing import Any

from aiohttp import web

DOCUMENTATION = r"""
---
short_description: Serve the approval page of waiting plans, and Slack's interactive buttons; one event per decision
description:
  - An HTTP server for the links a waiting plan's message carries (M(sentinel.heal.heal)'s C(approval_page_url) and
    C(approval_link_secret)). Each link is signed (HMAC-SHA256 under O(link_secret)) over the plan's id, its hash, its
    host and its expiry, the plan's own.
  - C(GET /approve?t=TOKEN) shows the plan - its host, service and failure, each step's argv with the policy's verdict,
    the diff a restore puts back, when it expires - with Approve and Deny buttons and a field for the approver's
    personal token. A C(GET) never decides anything (chat clients fetch links to preview them).
  - C(POST /approve) (the page's form, with its anti-forgery token, signed for that link and valid 30 minutes) decides,
    when the approver's personal token is one of O(approvers); C(POST /slack/interactive) (a Slack app's
    I(Interactivity) request URL) decides for a listed Slack user, once Slack's signature (C(X-Slack-Signature) over
    C(v0:TIMESTAMP:BODY) with O(slack_signing_secret)) holds and its timestamp is less than five minutes from now.
  - A decision holds while the plan still waits with the very hash the link names, undecided - here or by
    C(sentinel.heal.approve) - and unexpired. It is recorded in the memory (at most one per plan) and becomes one event
    C(sentinel.approval) (C(plan_id), C(decision) - C(approved) or C(denied), C(approver) - the listed name, C(via) -
    C(page) or C(slack)) and C(meta.hosts) C(localhost) and the plan's host, so that a C(run_playbook) action is limited
    to what C(sentinel.heal.approve) touches (its first play is localhost's); the rulebook C(sentinel.heal.approve_from_chat)
    runs C(sentinel.heal.approve) for exactly that plan.
  - Everything else is refused with an HTTP error that says why - a forged link or form (403), an expired link, plan or
    page (410), a link of another plan (403), a plan decided before, a second click and a retry included (409, naming
    who decided and when), an unlisted approver (403), a bad Slack signature or an old timestamp (401), a plan the
    memory does not hold (404) - and recorded in the memory (C(sentinel.heal.memory_export) C(format=audit) has them as
    C(approval_request) records), or in the source's log when the memory cannot take it.
  - The memory is the one the inventory's heal jobs share (its C(autoheal_state_dir) or C(autoheal_memory_url)), as the
    C(sentinel.heal.alert_webhook) source finds it. Serve it behind a TLS proxy; it listens on loopback by default.
options:
  inventory:
    description: Path of the inventory (the one given to C(ansible-rulebook -i) too); it says where the memory is.
    type: str
    required: true
  host:
    description: Address to listen on.
    type: str
    default: 127.0.0.1
  port:
    description: TCP port to listen on.
    type: int
    default: 5001
  link_secret:
    description:
      - The key the heal jobs sign approval links with (their C(approval_link_secret)); when empty, the environment
        variable C(SENTINEL_HEAL_APPROVAL_LINK_SECRET). At least 32 characters. A secret.
    type: str
    default: ""
  approvers:
    description:
      - Who may decide, each with a C(name) and at least one of C(slack_user) and C(token_sha256). Empty - every decision
        is refused.
    type: list
    elements: dict
    default: []
    suboptions:
      name:
        description: The approver's name, as C(sentinel.heal.approve) records it and the host's decision log shows it (letters, digits, C(-_.@)).
        type: str
        required: true
      slack_user:
        description: The approver's Slack user id (C(U024BE7LH)), for Slack's buttons.
        type: str
      token_sha256:
        description:
          - The SHA-256 (hex) of the approver's personal token, which the page asks for; the token itself is given to the
            person alone (C(python3 -c 'import secrets; print(secrets.token_urlsafe(24))'), then C(printf %s TOKEN | sha256sum)).
        type: str
  slack_signing_secret:
    description: The Slack app's I(Signing Secret) (Basic Information); empty - C(/slack/interactive) refuses every request. A secret.
    type: str
    default: ""
"""

EXAMPLES = r"""
- name: Decide waiting plans from chat
  hosts: all
  sources:
    - sentinel.heal.approval_page:
        inventory: inventory/
        port: 5001
        link_secret: "{{ SENTINEL_HEAL_APPROVAL_LINK_SECRET }}"
        slack_signing_secret: "{{ SLACK_SIGNING_SECRET }}"
        approvers:
          - {name: alice, slack_user: U024BE7LH, token_sha256: 9f2b...}
  rules:
    - name: Approve
      condition: event.sentinel.approval.decision == "approved"
      action:
        run_playbook:
          name: sentinel.heal.approve
          extra_vars:
            plan_id: "{{ event.sentinel.approval.plan_id }}"
            approver: "{{ event.sentinel.approval.approver }}"
"""

# ansible-rulebook runs a source from its file (runpy), outside Ansible's collection loader: the directory that holds
# ansible_collections/ (this file is ansible_collections/sentinel/heal/extensions/eda/plugins/event_source/) makes
# the collection's controller code importable.
sys.path.append(str(Path(__file__).parents[7]))

from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.approval_page import Answer, approval_desk  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.eda.options import APPROVAL_PAGE_OPTIONS, source_options  # noqa: E402

logger = logging.getLogger("sentinel.heal.approval_page")
# a form or a Slack payload; anything larger is no decision
MAX_BODY_BYTES = 64 * 1024


async def main(queue: asyncio.Queue[Any], args: dict[str, Any]) -> None:
    options = source_options("approval_page", APPROVAL_PAGE_OPTIONS, args)
    desk = approval_desk(options)

    async def answered(answer: Answer) -> web.Response:
        if answer.event is not None:
            await queue.put(dict(answer.event))
        return web.Response(status=answer.status, text=answer.body, content_type=answer.content_type, charset="utf-8",
                            headers=dict(answer.headers))

    async def look(request: web.Request) -> web.Response:
        return await answered(desk.show(request.query.get("t", ""), request.remote or ""))

    async def decide(request: web.Request) -> web.Response:
        form = await request.post()
        return await answered(desk.decide({key: str(value) for key, value in form.items()}, request.remote or ""))

    async def slack(request: web.Request) -> web.Response:
        return await answered(desk.slack(request.headers, await request.read(), request.remote or ""))

    app = web.Application(client_max_size=MAX_BODY_BYTES)
    app.router.add_get("/approve", look)
    app.router.add_post("/approve", decide)
    app.router.add_post("/slack/interactive", slack)
    runner = web.AppRunner(app, access_log=None)
    await runner.setup()
    try:
        await web.TCPSite(runner, options["host"], options["port"]).start()
        logger.info("approval page on %s:%d: %d approvers, Slack %s", options["host"], options["port"], len(desk.approvers),
                    "on" if options["slack_signing_secret"] else "off")
        await asyncio.Future()  # until ansible-rulebook stops the source
    finally:
        await runner.cleanup()
        desk.memory.close()
