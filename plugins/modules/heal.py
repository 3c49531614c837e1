#!/usr/bin/python
# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

# This module is implemented as the action plugin plugins/action/heal.py; this file holds its documentation.

from __future__ import annotations

DOCUMENTATION = r"""
---
module: heal
short_description: Heal the failed services of a host - diagnose, plan, guard, execute, verify, remember
version_added: 0.1.0
description:
  - Runs on the controller for each host. For every failed service (from a previous
    M(sentinel.heal.service_check), or checked here when O(failures) is omitted) it runs the heal
    loop, a small graph of nodes (diagnose, plan, guard, execute, verify, record), retrying up to
    O(max_attempts) times and escalating when the budget is spent or the guard blocks the plan.
  - Plans come, in order of trust, from a fix that was verified before for the same failure
    fingerprint (memory), from the runbooks (the shipped ones and O(runbooks)), from the LLM
    (O(llm), when configured), or the fallback runbooks and a generic restart of the service. A plan
    whose steps already failed for the fingerprint is not tried again. When the LLM is down, slow,
    over its token budget or answers nonsense, the offline planner plans and the timeline says so.
  - Before planning, read-only evidence commands that the policy allows (such as C(nginx -t),
    C(ss -ltnp), the tail of the service's log) may run on the host, all in one call of
    M(sentinel.heal.evidence) over the play's own connection (with the privilege each rule gives), and are
    recorded in the episode; steps that change the host always run through ansible-runner. When O(failures) is
    omitted, the check itself reads them for a service that fails (the ALLOWed evidence commands of its runbooks,
    O(sentinel.heal.service_check#module:evidence_commands)), so most incidents need no second call.
  - The planner may look before it plans (the think loop, C(plan -investigate-> observe -> plan) in the graph) -
    instead of a plan, a runbook's follow-up reads (its C(investigate) list, keyed on what its first evidence showed)
    or the LLM (O(llm.reads)) ask for up to 4 read-only commands, each with why, at most O(think_rounds) rounds per
    attempt. Each is judged by the policy in the incident's context, as evidence is; only what a rule marked
    C(read_only) allows runs, at once, all of a round in one ansible-runner run, each with O(step_timeout) and an
    output cap, redacted like every output. Anything else (approve, block, an allowed change, a command read
    before, one past the round's limit, the incident's read budget of 16000 characters or its deadline) does not
    run and is never queued for a person; the planner is told why and plans without it. Host output reaches the
    model fenced as untrusted data. A model that only ever asks to read ends C(escalated) with what it read. Every
    read is in the timeline, the episode and C(incidents[].reads); a verified plan found this way is remembered,
    so the same failure next time runs neither the reads nor the LLM. In check mode no read runs; the timeline says
    which would have.
  - The guard decides each step with the command policy (O(policy)) - allow, approve or block.
    A plan runs only when every step is allowed; a plan needing approval is stored and the host
    ends C(awaiting_approval), a blocked plan ends C(escalated). Nothing the policy does not
    understand runs unattended.
  - When a service it was asked to heal stays down (C(status) V(escalated)) the task fails, with the summary as its
    C(msg) and the whole result registered; the role P(sentinel.heal.autoheal#role) fails the host in its summary instead,
    once it exported the plans waiting for a person.
  - The kill switch holds on every path - while healing is suspended (M(sentinel.heal.suspension),
    C(sentinel.heal.suspend)) no remediation starts, one running is cancelled
    before its next step, and the incident ends C(suspended) (the job does not fail). Checks, evidence
    reads and check mode still run.
  - A unit a person masked (systemd hosts) is left alone - no attempt, nothing run - and the incident
    ends C(masked).
  - On systemd hosts the loop never fights systemd. A unit that systemd restarts by itself (its
    C(Restart=), state C(auto-restart)) is waited for, its C(RestartSec) plus a grace, with nothing run;
    when it comes back the incident ends C(recovered). A unit whose own restarts keep failing is
    escalated with the cause from its journal, not restarted again. A unit that hit its start limit
    after starts that ended cleanly gets C(systemctl reset-failed UNIT) and one start. Steps written
    C(service NAME VERB) run as C(systemctl VERB UNIT), UNIT being the unit service_check found running
    the service (C(postgresql@15-main) behind Debian's C(postgresql)). Unit files and drop-ins are never
    edited, reverted or reloaded by the loop.
  - Allowed steps run with ansible-runner against the same host, with the connection the play
    resolved for it, one run per attempt, each step as C(ansible.builtin.command) with an argv
    (never a shell), privilege escalation where the policy rule says so, a timeout per step;
    the run's artifacts are kept under O(state_dir)C(/runs).
  - A plan that needs approval is shown at the terminal (its argv, escaped, with each step's
    verdict) when one is attached and O(interactive_approval) is on, and runs at once when the
    operator types C(yes). Otherwise it is stored, bound by a hash to its exact steps, host,
    service and policy version, with an expiry (O(approval_ttl)); C(sentinel.heal.approve) runs or
    denies it later, and C(pending_plans) carries it to the next job of an AWX workflow.
  - Only a recovery that M(sentinel.heal.service_check) verifies counts as healed.
  - Every attempt is written to the memory as one episode, in one transaction - the SQLite file in O(state_dir), or
    the PostgreSQL database of O(memory_url), which several controllers or AWX execution nodes share.
  - Secrets are masked on the controller in everything kept or shown (memory, run artifacts, the
    result) - vault-encrypted variables, connection and become passwords, variables named like
    secrets, C(OPENAI_API_KEY), O(redact_values) - besides the patterns service_check masks on the host.
  - In check mode the loop stops at the guard; nothing runs on the host and nothing is written.
    With C(--diff) each incident shows its failure and the plan with the guard's verdict per step.
author:
  - Sentinel Heal Maintainers (@sentinel-heal)
extends_documentation_fragment:
  - ansible.builtin.action_common_attributes
  - ansible.builtin.action_common_attributes.flow
  - sentinel.heal.controller
  - sentinel.heal.controller.memory
  - sentinel.heal.controller.verification
  - sentinel.heal.controller.attributes
  - sentinel.heal.controller.steps
  - sentinel.heal.controller.privilege
  - sentinel.heal.controller.limits
  - sentinel.heal.planning
  - sentinel.heal.planning.llm
  - sentinel.heal.notify
attributes:
  check_mode:
    support: full
    details: The loop stops at the guard; nothing runs on the host and nothing is written to memory.
  diff_mode:
    support: full
    details: Shows the failure and the plan, with the guard's verdict on each step.
options:
  mode:
    description:
      - How far the loop acts on its own (the role's C(autoheal_mode), per host or group; a service's own C(mode) wins).
      - C(observe) - check, diagnose and plan; nothing runs on the host and nothing waits for approval; the incident
        ends C(observed) with the plan it would have run and the guard's verdict. A good start on a new fleet.
      - C(review) - every plan waits for a person (see C(sentinel.heal.approve)), even one the policy allows.
      - C(autonomous) - what the policy allows runs unattended.
    type: str
    choices: [observe, review, autonomous]
    default: autonomous
  restore_known_good:
    description:
      - For services that do not say (their own C(restore_known_good)), how the loop may put back the last known good
        version of a configuration file that changed since the service last worked, when its failure is a
        configuration error that file explains (the role's C(autoheal_restore_known_good), per host or group).
      - C(approve) - the plan waits for a person, who sees the diff of what will be put back.
      - C(auto) - it runs unattended, as the policy's C(restore-last-known-good) rule allows, where a configuration test
        checks the restored file (one built in for the service, or its C(config_test)); without one, and for a file of
        a configuration directory that holds secrets (C(/etc/mysql)), a person approves it.
      - C(off) - never; the escalation says what changed.
      - The current version is kept aside on the host (its path is in the escalation and the report), the good one put
        back at once, and the service's configuration test run; a failing test undoes the restore. With the executor on
        the host (C(step_privilege=executor)), the host checks the file and the copy again, under the host role's
        C(host_restore_known_good); with C(step_privilege=become), M(sentinel.heal.known_good_restore) does it as root;
        with C(step_privilege=sudo), no restore is planned (a sudo rule cannot bind one to the incident's file).
    type: str
    choices: [approve, auto, "off"]
    default: approve
  target_services:
    description:
      - Only these of O(services) (their names), and the services they need (their C(depends_on), and what those
        need), are checked and healed; empty, all of them. A job about one alert heals what the alert names, and a
        failing service it needs first.
      - A name O(services) does not declare fails the task, naming it.
    type: list
    elements: str
    default: []
  max_attempts:
    description: Attempts per failed service before it is escalated (1-10).
    type: int
    default: 3
  verify_retries:
    description: How many times verification checks the service before the attempt counts as failed (1-30).
    type: int
    default: 3
  relapse_window:
    description:
      - Seconds after a heal within which a failure of the same service on the same host is that heal's relapse
        (0 to 604800; C(0) never links one). The new incident names the heal it came back after (C(relapsed_from) in
        RV(incidents) and in its episodes), its reason says first when the service was healed, by what, and when and how
        it failed again, and the heal's episode records C(relapsed_at). The plan that relapsed is no longer replayed as a
        verified fix.
      - A relapse is healed once more, unless the same cause is back (the file the repair put right changed again, its
        port held again, its configuration test failing again) or it is the second relapse in a row; either ends
        C(escalated) at once with the evidence of both times, and nothing runs, since something keeps undoing the repair.
    type: int
    default: 900
  interactive_approval:
    description:
      - Ask at the terminal when a plan needs approval. Without a terminal (AWX, cron, CI) the plan is
        stored and waits, whatever this says.
    type: bool
    default: true
  approval_key:
    description:
      - With O(step_privilege=executor) and O(interactive_approval), the SSH key of the person at the terminal (a
        private key, or a public key whose private half ssh-agent holds) that signs a plan they approve there, for
        the executor on the host; it runs a step that needs a person only with a signature by a key the host lists
        under that person's login name. Without it, the host refuses such steps.
    type: path
    default: ""
  approval_ttl:
    description: Seconds a stored plan can be approved before it expires (60 to 2592000).
    type: int
    default: 86400
  think_rounds:
    description:
      - Rounds of reads the planner may ask for before it plans, per attempt (0 to 2; 0 turns the think loop off, and
        the planner plans from the evidence alone).
    type: int
    default: 2
  fleet_min_hosts:
    description:
      - A fleet incident - the same failure (the same service, failure class and error text once numbers, addresses,
        paths and times are set aside) on at least this many hosts within O(fleet_window), whatever runs saw them
        (one play over the fleet, or EDA jobs of one host each), is one incident, not one per host. It is recorded
        once in the memory with its hosts, first and last seen and what their evidence has in common (the same
        address or name, package change, changed file, full filesystem, error line); while it is open, no new plan
        (the LLM's, the generic fallback) runs on any of its hosts, a plan verified before (memory's, a runbook's) runs
        on one host first - the incident's canary, in whatever run - and on the others only once it verified there,
        never once it failed there; its hosts end C(escalated) with the incident in their reason. It closes once each
        of its hosts was seen without that failure (healed, or checked healthy by a later run). A unit a person
        masked, or a service a person silenced, counts toward none; in check mode nothing is written, so a host counts
        toward none either.
      - The hosts of one run that fail at the same time meet in the memory before they count (each waits until no
        other host of its batch wrote what it saw for half a second, or every host of the batch did, at most 5 s; a
        run of one host counts at once). A healthy host writes nothing, unless it ends an open fleet incident.
      - C(0) turns this rule off (0-100000). Per host or group, as any inventory variable (the role's
        C(autoheal_fleet_min_hosts)).
    type: int
    default: 5
  fleet_min_percent:
    description:
      - A fleet incident also when the same failure shows on at least this percentage of the run's hosts (the play's
        hosts, every C(serial) batch included), from three hosts on - two hosts failing alike may be chance.
      - C(0) turns this rule off (0-100).
    type: int
    default: 50
  fleet_window:
    description: Seconds within which failures of different runs count toward O(fleet_min_hosts) (0-86400).
    type: int
    default: 600
  approval_page_url:
    description:
      - The approval page (the C(sentinel.heal.approval_page) event source, the rulebook C(sentinel.heal.approve_from_chat))
        as people reach it, for example C(https://approvals.example.com); a waiting plan's message then carries a link
        to it, signed with O(approval_link_secret) over the plan's id, its hash, its host and its expiry (the plan's
        own), which shows the plan and decides nothing until a listed approver presses Approve or Deny there.
      - A plan with a step the policy keeps out of chat (a rule whose C(approve_from_chat) is false, a package downgrade in the
        shipped policy) gets no link; its message says it is approved with C(sentinel.heal.approve) only.
      - Empty (the default) - messages name the C(sentinel.heal.approve) command only. See the guide C(docsite/approvals).
    type: str
    default: ""
  approval_link_secret:
    description:
      - The key approval links are signed with (HMAC-SHA256), the approval page's C(link_secret); at least 32
        characters (C(openssl rand -base64 32)). A secret - from a vault, or the controller's environment variable
        C(SENTINEL_HEAL_APPROVAL_LINK_SECRET) when this is empty; never logged or returned.
      - Needed with O(approval_page_url).
    type: str
    default: ""
notes:
  - Needs C(ansible-runner) on the controller (see the collection's C(requirements.txt)).
  - Run it with privilege escalation (C(become)) so that checks can read logs and sockets; steps get privilege
    escalation only where the policy says so.
seealso:
  - module: sentinel.heal.service_check
"""

EXAMPLES = r"""
- name: Check the services
  sentinel.heal.service_check:
    services: "{{ my_services }}"
  become: true
  register: health

- name: Heal what failed
  sentinel.heal.heal:
    services: "{{ my_services }}"
    failures: "{{ health.failures }}"
    max_attempts: 2
  become: true
  when: health.failures | length > 0
  register: healing

- name: Report
  ansible.builtin.debug:
    msg: "{{ healing.summary }}"
  when: healing is not skipped
"""

RETURN = r"""
status:
  description:
    - The worst end state of the host's incidents - C(healthy), C(masked) (a person masked the unit; left
      alone), C(observed) (observe mode - the plan it would have run; nothing ran), C(silenced) (a person's
      silence, M(sentinel.heal.silence), maintenance marker or declared window covers it -
      checked, nothing planned or run), C(recovered) (systemd's own C(Restart=) brought it back; nothing ran), C(healed),
      C(suspended) (the kill switch, M(sentinel.heal.suspension), was thrown - the remediation
      did not start, or stopped before its next step), C(deferred) (a cap of the blast radius, O(max_running) or
      O(max_hosts_per_run), or the run's budget O(max_attempts_per_run) was spent - the remediation did not start;
      the next run takes it up; or a new plan's canary, the first host of the run to try it, failed it or had not
      verified it before the incident's deadline), C(halted) (more than O(max_fail_percentage) of the run's hosts
      failed verification - nothing more is attempted in the run), C(in_progress_elsewhere) (another run is remediating the same service on the host
      right now; nothing ran here),
      C(awaiting_approval), C(escalated) (also past O(incident_timeout), and for a fleet incident's hosts when its
      plan may not run - see O(fleet_min_hosts)) or C(unreachable) (the host did not answer,
      before healing or during a remediation; the attempt is recorded); in check mode also C(planned) (an allowed
      plan that did not run).
  returned: always
  type: str
  sample: healed
attempts:
  description: Attempts made, over all incidents.
  returned: always
  type: int
  sample: 1
episodes:
  description: Ids of the episodes written to memory.
  returned: always
  type: list
  elements: int
  sample: [12]
plan_id:
  description: Id of the first stored plan that awaits approval.
  returned: always
  type: str
  sample: 8c1e4bd1f0b44f0aa7d9f3b1e2c0a6d5
plan_ids:
  description: Ids of all stored plans that await approval.
  returned: always
  type: list
  elements: str
pending_plans:
  description:
    - The plans that await approval, each with C(plan_id), C(host), C(service), C(reason) and its C(steps)
      (C(argv), C(command), C(decision), C(reason)). The role exports them with C(set_stats) as
      C(autoheal_pending_plans) for the next job of an AWX workflow.
  returned: always
  type: list
  elements: dict
incidents:
  description:
    - One entry per failed service with its status, reason, fingerprint, plan, verdicts, step results and graph path.
    - C(reads) lists the think loop's rounds (C(attempt), C(round), C(source), C(reference)) with each read's C(argv),
      C(why), C(decision), C(rule), C(outcome) (C(ran) or why it did not), C(rc) and C(output) (redacted, capped).
    - C(artifacts) lists the ansible-runner run directories of the incident (its remediation runs), kept
      under O(state_dir)/runs for audit until M(sentinel.heal.memory_prune) prunes them.
    - C(host), C(incident_id) and C(started_at) name the incident; C(llm) (when an LLM is configured) has its C(model),
      C(calls) and tokens.
    - C(fleet_incident) is the fleet incident the failure is part of (see O(fleet_min_hosts) and
      M(sentinel.heal.memory_info) with C(kind=fleet_incidents) for its fields), or null.
    - C(relapsed_from) is the episode of the heal the failure came back after within O(relapse_window), or null.
    - C(attempt_log) has every attempt in the form of its episode in the memory (C(id) there, or null when it was not
      recorded) - the diagnosis, C(evidence), C(plan), C(verdicts), C(policy_version), C(approved_by), C(results) (the
      evidence reads, the think loop's reads, the C(steps) that ran with their rc, duration and output, the
      C(verification), the C(artifacts)), C(outcome) and times - what the run report and the audit trail of the
      sentinel.heal.timeline callback show.
  returned: always
  type: list
  elements: dict
timeline:
  description: Every step of every incident in order, each with C(at), C(service), C(node) and C(message).
  returned: always
  type: list
  elements: dict
interrupted:
  description:
    - Remediations of this host whose job died mid-run (killed, OOM, a reboot), found by this run and recorded as
      episodes with outcome C(interrupted) - each with C(episode), C(service), C(incident_id), C(started) (the steps
      that had started), C(summary) and C(run_dir) (its ansible-runner artifacts).
  returned: when an earlier job was interrupted on this host
  type: list
  elements: dict
fleet_incidents_closed:
  description:
    - The fleet incidents this host closed - it was the last of their hosts to be seen without their failure (healed
      now, or checked healthy); each as M(sentinel.heal.memory_info) with C(kind=fleet_incidents) shows it.
  returned: always
  type: list
  elements: dict
notifications:
  description:
    - What became of each message to the O(notify) destinations - C(destination) (its name, never its URL), C(type),
      C(event), C(key), C(incident_id), C(delivered), C(tries), C(error), C(skipped) (not tried - the destination did
      not answer earlier in the run); one not delivered is a warning too.
  returned: when O(notify) sent or skipped a message
  type: list
  elements: dict
summary:
  description: One human line per incident (and per interrupted remediation found, and per fleet incident closed).
  returned: always
  type: list
  elements: str
  sample: ["web1: nginx healed in 1 attempt with: service nginx start [plan from runbook nginx-stale-pid]"]
"""
