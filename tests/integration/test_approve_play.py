"""approve.yml on this machine (no lab needed): an approved plan runs only when nothing a person or the limits said
holds it back - not while healing is suspended, not while the service is silenced, not while it flaps - and each
refusal leaves the plan waiting, nothing run."""

from __future__ import annotations

import re
import sqlite3
from pathlib import Path

from conftest import one_line, run_playbook
from ledger import GROUP, ledger


def _status(state: Path, plan_id: str) -> str:
    with sqlite3.connect(state / "memory.sqlite3") as conn:
        return str(conn.execute("SELECT status FROM plans WHERE plan_id = ?", (plan_id,)).fetchone()[0])


def test_an_approved_plan_does_not_run_while_suspended_silenced_or_flapping_and_runs_once_none_holds(tmp_path: Path) -> None:
    service = ledger(tmp_path)
    state = tmp_path / "state"

    def play(playbook: str, *args: str) -> str:
        run = run_playbook(playbook, "-i", str(service.inventory), "-e", f"autoheal_target={GROUP}", *args, state_dir=state)
        return f"rc={run.rc} " + one_line(run.output)

    waiting = play("playbooks/heal.yml", "-e", "autoheal_mode=review")
    assert waiting.startswith("rc=0") and "awaits approval of plan" in waiting, waiting
    [plan_id] = re.findall(r"awaits approval of plan ([0-9a-f]{32})", waiting)
    approve = ("playbooks/approve.yml", "-e", f"plan_id={plan_id}", "-e", "approver=bob")
    # the listing a person reads: times in ISO 8601 with the zone and from now, not epoch seconds
    listing = play("playbooks/approve.yml")
    assert re.search(r"waiting_since: \S*\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d, (?:\d+ s ago|now)", listing), listing
    assert re.search(r"expires: \S*\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d, in 23 h 59 min", listing), listing
    assert plan_id in listing and "created_at" not in listing and "expires_at" not in listing

    assert play("playbooks/suspend.yml", "-e", "reason='disk swap'", "-e", "by=alice").startswith("rc=0")
    refused = play(*approve)
    assert refused.startswith("rc=2") and "no approved plan runs while it is suspended" in refused, refused
    assert play("playbooks/suspend.yml", "-e", "resume=true", "-e", "by=alice").startswith("rc=0")

    assert play("playbooks/silence.yml", "-e", "target=localhost", "-e", "service=ledger", "-e", "duration=1h", "-e", "reason=mine",
                "-e", "by=alice").startswith("rc=0")
    refused = play(*approve)
    assert refused.startswith("rc=2") and "ledger on localhost: silenced by alice (silence 1): mine" in refused, refused
    assert re.search(r"the silence limit holds until \d{4}-\d\d-\d\dT\d\d:\d\d:\d\d[+-]\d\d:\d\d, in 59 min", refused), refused
    assert play("playbooks/silence.yml", "-e", "target=localhost", "-e", "lift=true", "-e", "by=alice").startswith("rc=0")
    assert _status(state, plan_id) == "pending" and not service.up

    # healed once meanwhile by a scheduled job and down again: with a limit of one remediation an hour, it flaps
    assert play("playbooks/heal.yml").startswith("rc=0") and service.up
    service.stop()
    refused = play(*approve, "-e", "autoheal_flap_limit=1")
    assert refused.startswith("rc=2") and f"plan {plan_id} does not run: ledger: flapping: remediated 1 times" in refused, refused
    assert _status(state, plan_id) == "pending" and not service.up

    approved = play(*approve)
    assert approved.startswith("rc=0") and "ledger healed in 1 attempt" in approved, approved
    assert _status(state, plan_id) == "executed" and service.up
