"""A person fixes things between two runs, on the lab: what the first run could not heal, the second heals once the
cause is gone, and says that the cause the first reported is gone and that it tries again. The first run's memory is
the second's (one state dir): a plan that failed there is excluded only while the cause it failed on holds."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
from conftest import Faults, episodes, one_line, redis_refuses_directive, run_playbook, sh

HEAL = "playbooks/heal.yml"
CONF = "/etc/redis/redis.conf"
BACKUP = "/var/backups/lab-redis-bad-directive.conf"
# restores stay off: the person, not the loop, puts the file back
RESTORES_OFF = ("-e", "autoheal_restore_known_good=off")


# node1 boots systemd (the unit loops into its start limit, the journal keeps redis's words); node3 is sysv (the init
# script exits 0 and redis's words are in what the start printed or in its log) and trixie's redis 8: the first run
# escalates on them on both
@pytest.mark.parametrize("host", ["node1", "node3"])
def test_a_persons_fix_between_two_runs_heals_in_the_second_which_says_the_cause_is_gone(
        lab: Any, faults: Faults, tmp_path: Path, host: str) -> None:
    # a healthy check keeps redis's configuration as its last known good: what changed since is the evidence of the cause
    healthy = run_playbook(HEAL, "--limit", host, state_dir=tmp_path)
    assert healthy.rc == 0 and "every declared service is healthy" in one_line(healthy.output), healthy.output
    faults.inject(host, "redis-bad-directive")
    first = run_playbook(HEAL, "--limit", host, *RESTORES_OFF, state_dir=tmp_path)
    said = one_line(first.output)
    assert first.rc == 2 and f"{host} redis: escalated" in said, first.output
    assert f"what changed since it last worked: {CONF} modified" in said, first.output
    assert redis_refuses_directive(lab, host) in said and "'lab-bad-directive yes'" in said, first.output
    # the person puts the file back, as they would by hand, and leaves redis down: the next run is to heal it
    sh(lab, host, "cp", "-p", BACKUP, CONF)
    assert "PONG" not in sh(lab, host, "redis-cli", "ping")
    second = run_playbook(HEAL, "--limit", host, *RESTORES_OFF, state_dir=tmp_path)
    said = one_line(second.output)
    assert second.rc == 0 and f"{host}: redis healed" in said, second.output
    assert "the cause reported at " in said and f"file {CONF} modified" in said, second.output
    assert f"is gone (now: file {CONF} as last known good); trying again" in said
    assert "every known plan was tried" not in said
    assert sh(lab, host, "redis-cli", "ping").strip() == "PONG"
    assert [episode["outcome"] for episode in episodes(tmp_path)][-1] == "healed"
