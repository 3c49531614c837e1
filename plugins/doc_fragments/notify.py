# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """The notify option of the tasks that tell people (heal, execute, approval): one argument spec
    (plugin_utils/notify/destinations.py NOTIFY_OPTION), documented once."""

    DOCUMENTATION = r"""
options:
  notify:
    description:
      - Where people are told of incidents (the role's and the playbooks' C(autoheal_notify)) - one message per incident
        and state change, never per attempt, sent once the outcome is final - escalated (the cause in the service's
        words, what was tried, what changed, the next action), awaiting approval (each step's argv, the diff a restore
        puts back, the expiry), approved by a person, healed after a wait, a relapse or more than one attempt
        (C(resolved)), denied by a person (who and why), and a fleet incident opened or closed (one message for all its
        hosts, said once by whichever host of every job, controller and execution node sharing the memory gets there
        first; a host of it where nothing ran says nothing of its own).
      - M(sentinel.heal.heal) tells of its incidents and fleet incidents; M(sentinel.heal.execute) of a plan a person
        approved - C(approved) (PagerDuty acknowledges the page the wait opened, under the same C(dedup_key)), then
        C(resolved) or C(escalated) once it ran, each naming who approved; M(sentinel.heal.approval) of a denial.
        Nothing is sent in check mode.
      - Every text is redacted as the task's result is, and host and model text is escaped for each format.
      - A destination that fails is retried O(notify[].retries) times with a short backoff, then recorded - a warning
        on the incident and C(notifications) in the result (the timeline callback's C(audit_file) gets a
        C(notification) record) - and never fails the task. One that does not answer within O(notify[].timeout) is
        skipped by every host for the rest of the job (a ledger in O(state_dir)C(/notify)).
      - See the guide C(docsite/notify) for each destination's setup and an example message.
    type: list
    elements: dict
    default: []
    suboptions:
      type:
        description:
          - C(slack) and C(mattermost) - an incoming webhook (Block Kit; attachments). C(teams) - a Workflows webhook
            (C(When a Teams webhook request is received)) posting an Adaptive Card. C(pagerduty) - Events API v2
            (C(trigger) with a C(dedup_key) per incident, C(acknowledge) when a person approved or denied its plan,
            C(resolve) when healed). C(webhook) - plain JSON, documented in C(docs/notify-schema.json) (ServiceNow, Jira
            automation).
        type: str
        required: true
        choices: [slack, mattermost, teams, pagerduty, webhook]
      name:
        description: What warnings call the destination (its URL never); the default is its place, C(notify[0] (slack)).
        type: str
      url:
        description:
          - The webhook's URL; for C(pagerduty) optional, C(https://events.pagerduty.com/v2/enqueue) by default.
          - A secret - keep it in a vault or the environment; it is never logged or returned.
        type: str
      routing_key:
        description: The integration key of a PagerDuty service's Events API v2 integration (C(pagerduty) only; a secret).
        type: str
      timeout:
        description: Seconds each try may take (0.1-60).
        type: float
        default: 5.0
      retries:
        description: Tries after the first, for a refused connection or a 5xx, 408 or 429 answer (0-5); a timeout is not retried.
        type: int
        default: 2
      events:
        description:
          - What this destination is told; the default is all but C(healed) and C(approved) (and C(approved) for
            C(pagerduty), which acknowledges its incident). C(healed) is every heal, a first try's too.
        type: list
        elements: str
        choices: [escalated, awaiting_approval, resolved, healed, approved, denied, fleet_opened, fleet_closed]
      interactive:
        description:
          - C(slack) only - a waiting plan's message has Approve and Deny buttons besides its link to the approval page
            (with the heal's O(sentinel.heal.heal#module:approval_page_url)); the Slack app's I(Interactivity) request URL must be the page's
            C(/slack/interactive) (the C(sentinel.heal.approval_page) event source). Without it, the link alone.
        type: bool
        default: false
"""
