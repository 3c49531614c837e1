"""What a start said is evidence, on the lab: redis refusing a directive it does not know in /etc/redis/redis.conf. On a
bookworm sysv host Debian's init script exits 0 and redis 7's words go to the start's stderr only; trixie's redis 8
writes them to its log (the session's node3); on a systemd host the journal has them. Either way the heal names
redis's words, the configuration error and what changed since redis last worked, and offers the restore of the last
known good configuration (approve, the default), which heals once approved."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
from conftest import SYSV_HOSTS, Faults, acted, episodes, one_line, redis_refuses_directive, run_playbook, sh

HEAL = "playbooks/heal.yml"
APPROVE = "playbooks/approve.yml"
CONF = "/etc/redis/redis.conf"


def _a_redis_configuration_error_escalates_in_redis_words_and_offers_the_restore(lab: Any, faults: Faults, tmp_path: Path,
                                                                                 host: str, started_to_hear: bool) -> None:
    named_state, offered_state = tmp_path / "named", tmp_path / "offered"
    said_by_redis = redis_refuses_directive(lab, host)
    assert run_playbook(HEAL, "--limit", host, state_dir=named_state).rc == 0  # the host keeps redis's configuration as good
    faults.inject(host, "redis-bad-directive")

    named = run_playbook(HEAL, "--limit", host, "-e", "autoheal_restore_known_good=off", state_dir=named_state)
    said = one_line(named.output)
    assert named.rc == 2 and f"{host}: redis escalated: what changed since it last worked: {CONF} modified" in said, named.output
    assert "'+lab-bad-directive yes'" in said and said_by_redis in said and "'lab-bad-directive yes'" in said, said
    last = episodes(named_state)[-1]
    assert "read as invalid_config" in last["diagnosis"] and last["outcome"] == "escalated", last
    # the only thing run: where redis's words are in no log, one start, which exited 0 and is recorded as the failed
    # start it was; where a log or the journal has them, nothing
    ran = [argv for _purpose, argv in acted(named_state, host)]
    assert ran == ([["service", "redis-server", "start"]] if started_to_hear else []), ran
    starts = [step for episode in episodes(named_state) for step in (episode["results"] or {}).get("steps") or []]
    assert all(step["status"] == "failed" and said_by_redis in step["stderr"] for step in starts), starts

    offered = run_playbook(HEAL, "--limit", host, state_dir=offered_state)
    said = one_line(offered.output)
    assert offered.rc == 0 and "redis awaits approval of plan" in said and f"sentinel-heal-restore {CONF}" in said, offered.output
    assert said_by_redis in episodes(offered_state)[-1]["diagnosis"]
    [plan_id] = re.findall(r"awaits approval of plan ([0-9a-f]{32})", said)
    approved = run_playbook(APPROVE, "-e", f"plan_id={plan_id}", "-e", "approver=alice", state_dir=offered_state)
    assert approved.rc == 0 and f"redis healed in 1 attempt with: sentinel-heal-restore {CONF}" in one_line(approved.output), \
        approved.output
    assert "PONG" in sh(lab, host, "redis-cli", "ping")
    assert "lab-bad-directive" not in sh(lab, host, "cat", CONF)


def test_a_redis_configuration_error_on_sysv_escalates_in_redis_words_and_offers_the_restore(
        lab: Any, faults: Faults, tmp_path: Path) -> None:
    """node3 of the session's fleet: trixie's redis 8 logs its refusal, and the heal reads it there."""
    _a_redis_configuration_error_escalates_in_redis_words_and_offers_the_restore(lab, faults, tmp_path, "node3", started_to_hear=False)
    assert "(log /var/log/redis/redis-server.log)" in episodes(tmp_path / "named")[-1]["diagnosis"]


@pytest.mark.own_fleet
def test_a_redis_configuration_error_on_bookworm_sysv_is_heard_in_what_its_start_printed(
        lab: Any, faults: Faults, tmp_path: Path) -> None:
    """node3 on bookworm: redis 7 says its words before it opens its log, and only a start makes it say them."""
    lab.up(inits=SYSV_HOSTS)
    _a_redis_configuration_error_escalates_in_redis_words_and_offers_the_restore(lab, faults, tmp_path, "node3", started_to_hear=True)


def test_a_redis_configuration_error_on_systemd_escalates_in_redis_words_and_offers_the_restore(
        lab: Any, faults: Faults, tmp_path: Path) -> None:
    """The twin on node1: systemd's journal has redis's words, and the executor on the host puts the file back."""
    _a_redis_configuration_error_escalates_in_redis_words_and_offers_the_restore(lab, faults, tmp_path, "node1", started_to_hear=False)
