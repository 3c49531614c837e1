"""What a start said is evidence, on the lab: redis refusing a directive it does not know in /etc/redis/redis.conf.
On the sysv host Debian's init script exits 0 and redis's words go to the start's stderr only; on a systemd host the
journal has them. Either way the heal names redis's words, the configuration error and what changed since redis last
worked, and offers the restore of the last known good configuration (approve, the default), which heals once approved."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

from conftest import Faults, acted, episodes, one_line, run_playbook, sh

HEAL = "playbooks/heal.yml"
APPROVE = "playbooks/approve.yml"
CONF = "/etc/redis/redis.conf"
SAID = "Bad directive or wrong number of arguments"


def _a_redis_configuration_error_escalates_in_redis_words_and_offers_the_restore(lab: Any, faults: Faults, tmp_path: Path,
                                                                                 host: str) -> None:
    named_state, offered_state = tmp_path / "named", tmp_path / "offered"
    assert run_playbook(HEAL, "--limit", host, state_dir=named_state).rc == 0  # the host keeps redis's configuration as good
    faults.inject(host, "redis-bad-directive")

    named = run_playbook(HEAL, "--limit", host, "-e", "autoheal_restore_known_good=off", state_dir=named_state)
    said = one_line(named.output)
    assert named.rc == 2 and f"{host}: redis escalated: what changed since it last worked: {CONF} modified" in said, named.output
    assert "'+lab-bad-directive yes'" in said and SAID in said and "'lab-bad-directive yes'" in said.split(SAID)[0], said
    last = episodes(named_state)[-1]
    assert "read as invalid_config" in last["diagnosis"] and last["outcome"] == "escalated", last
    # the only thing run: on the sysv host one start, which exited 0 and is recorded as the failed start it was
    ran = [argv for _purpose, argv in acted(named_state, host)]
    assert ran == ([["service", "redis-server", "start"]] if host == "node3" else []), ran
    starts = [step for episode in episodes(named_state) for step in (episode["results"] or {}).get("steps") or []]
    assert all(step["status"] == "failed" and SAID in step["stderr"] for step in starts), starts

    offered = run_playbook(HEAL, "--limit", host, state_dir=offered_state)
    said = one_line(offered.output)
    assert offered.rc == 0 and "redis awaits approval of plan" in said and f"sentinel-heal-restore {CONF}" in said, offered.output
    assert SAID in episodes(offered_state)[-1]["diagnosis"]
    [plan_id] = re.findall(r"awaits approval of plan ([0-9a-f]{32})", said)
    approved = run_playbook(APPROVE, "-e", f"plan_id={plan_id}", "-e", "approver=alice", state_dir=offered_state)
    assert approved.rc == 0 and f"redis healed in 1 attempt with: sentinel-heal-restore {CONF}" in one_line(approved.output), \
        approved.output
    assert "PONG" in sh(lab, host, "redis-cli", "ping")
    assert "lab-bad-directive" not in sh(lab, host, "cat", CONF)


def test_a_redis_configuration_error_on_sysv_escalates_in_redis_words_and_offers_the_restore(
        lab: Any, faults: Faults, tmp_path: Path) -> None:
    _a_redis_configuration_error_escalates_in_redis_words_and_offers_the_restore(lab, faults, tmp_path, "node3")


def test_a_redis_configuration_error_on_systemd_escalates_in_redis_words_and_offers_the_restore(
        lab: Any, faults: Faults, tmp_path: Path) -> None:
    """The twin on node1: systemd's journal has redis's words, and the executor on the host puts the file back."""
    _a_redis_configuration_error_escalates_in_redis_words_and_offers_the_restore(lab, faults, tmp_path, "node1")
