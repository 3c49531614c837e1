"""sentinel.heal.memory through ansible-playbook, on a memory filled by the engine (no lab needed): on each backend, the
SQLite file in the state dir and a PostgreSQL database (memory_url, the password in PGPASSWORD as an AWX credential
gives it)."""

from __future__ import annotations

import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from conftest import ROOT, one_line, run_playbook
from memory_places import MemoryPlace

sys.path.insert(0, str(ROOT / "tests" / "unit" / "plugins" / "plugin_utils"))

from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, Plan, PlanSource, Step
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import MEMORY_FILE
from helpers import nginx_failure

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  module_defaults:
    sentinel.heal.memory: {memory_url: "{{ u }}"}
  tasks:
    - {name: list, sentinel.heal.memory: {operation: episodes, service: nginx, state_dir: "{{ d }}"}, register: listed}
    - {name: search, sentinel.heal.memory: {operation: search, text: "Address already in use", state_dir: "{{ d }}"}, register: found}
    - {name: show, sentinel.heal.memory: {operation: episode, episode_id: "{{ found.episodes[0].id }}", state_dir: "{{ d }}"}, register: shown}
    - {name: export, sentinel.heal.memory: {operation: export, dest: "{{ d }}/export.json", state_dir: "{{ d }}"}, register: exported}
    - name: prune in check mode
      sentinel.heal.memory: {operation: prune, older_than_days: 30, state_dir: "{{ d }}"}
      check_mode: true
      register: would_prune
    - {name: prune, sentinel.heal.memory: {operation: prune, older_than_days: 30, state_dir: "{{ d }}"}, register: pruned}
    - name: forget
      sentinel.heal.memory: {operation: forget, fingerprint: "{{ shown.episode.fingerprint }}", state_dir: "{{ d }}"}
      register: forgot
    - {name: after, sentinel.heal.memory: {operation: episodes, state_dir: "{{ d }}"}, register: after}
    - name: report
      ansible.builtin.copy:
        dest: "{{ d }}/report.json"
        content: "{{ {'listed': listed.episodes | length, 'found': found.episodes[0].error_text, 'shown': shown.episode.plan.source,
                     'exported': exported.count, 'would_prune': [would_prune.removed, would_prune.runs_removed],
                     'pruned': pruned.removed, 'runs_removed': pruned.runs_removed, 'forgot': forgot.removed,
                     'left': after.episodes | map(attribute='error_text') | list} | to_json }}"
        mode: "0600"
"""


def _on(place: MemoryPlace) -> dict[str, Any]:
    """What a playbook run needs to reach the place's memory: the variables d (state dir) and u (memory URL), and the
    password in the environment."""
    return {"extra": ["-e", f"d={place.state_dir}", "-e", f"u={place.url or ''}", "-e", f"autoheal_memory_url={place.url or ''}"],
            "env": {"PGPASSWORD": place.password} if place.password else {}}


def _only_in_its_place(place: MemoryPlace) -> bool:
    """The memory the playbook used was the place's: with a memory_url, no SQLite file was made in the state dir."""
    return (place.state_dir / MEMORY_FILE).exists() == (place.url is None)


def _attempt(finished_at: float, artifacts: list[str] | None = None) -> Attempt:
    plan = Plan(source=PlanSource.RUNBOOK, reference="port-conflict", rationale="r",
                steps=(Step(template="kill -TERM {port_owner_pid}", argv=("kill", "-TERM", "4242")),))
    return Attempt(number=1, plan=plan, outcome="healed", verified=True, started_at=finished_at - 1, finished_at=finished_at,
                   artifacts=artifacts or [])


def _run_dir(state_dir: Path, host: str, name: str, changed_at: float) -> str:
    run_dir = state_dir / "runs" / host / name
    (run_dir / "artifacts").mkdir(parents=True)
    (run_dir / "artifacts" / "stdout").write_text("ok")
    os.utime(run_dir, (changed_at, changed_at))
    return str(run_dir)


def test_memory_operations_through_a_playbook(memory_place: MemoryPlace) -> None:
    tmp_path, on = memory_place.state_dir, _on(memory_place)
    bind = nginx_failure("port_conflict", owner={"port": 80, "pid": 4242, "process": "python3", "cmdline": "x"})
    bind = type(bind)(**{**bind.__dict__, "summary": "nginx: bind() to 0.0.0.0:80 failed (98: Address already in use)"})
    old = nginx_failure("not_running")
    long_ago = time.time() - 90 * 86400
    runs = {name: _run_dir(tmp_path, host, name, changed_at) for host, name, changed_at in [
        ("web1", "of-the-pruned-episode", long_ago), ("web1", "old-but-still-referenced", long_ago),
        ("web2", "old-and-orphaned", long_ago), ("web1", "new-and-orphaned", time.time()),
    ]}
    with memory_place.open() as memory:
        memory.record_attempt(incident_id="bind", failure=bind, attempt=_attempt(time.time()))
        memory.record_attempt(incident_id="old", failure=old, attempt=_attempt(long_ago, [runs["of-the-pruned-episode"]]))
        memory.record_attempt(incident_id="recent", failure=old, attempt=_attempt(time.time(), [runs["old-but-still-referenced"]]))
    (tmp_path / "memory.yml").write_text(PLAYBOOK)
    run = run_playbook(str(tmp_path / "memory.yml"), *on["extra"], state_dir=tmp_path, env=on["env"])
    assert run.rc == 0, run.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert report == {"listed": 3, "found": bind.summary, "shown": "runbook", "exported": 3, "would_prune": [1, 2], "pruned": 1, "runs_removed": 2,
                      "forgot": 1, "left": [old.summary]}
    # the runs of pruned episodes and old orphans are gone; what an episode still points to, and anything new, stays
    assert sorted(str(path.relative_to(tmp_path / "runs")) for path in (tmp_path / "runs").glob("*/*")) == [
        "web1/new-and-orphaned", "web1/old-but-still-referenced"]
    exported = json.loads((tmp_path / "export.json").read_text())
    assert len(exported["episodes"]) == 3 and exported["episodes"][0]["plan"]["steps"][0]["argv"] == ["kill", "-TERM", "4242"]
    assert exported["memory"] == memory_place.where and _only_in_its_place(memory_place)


ROLE_PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  roles:
    - role: sentinel.heal.autoheal
      vars:
        autoheal_services: [{name: controller, status_check: false, check_command: "true"}]  # healthy: nothing to heal
        autoheal_become: false
        autoheal_state_dir: "{{ d }}"
        autoheal_memory_url: "{{ u }}"
"""


def test_the_role_prunes_once_per_play_only_when_a_retention_is_set(memory_place: MemoryPlace) -> None:
    tmp_path, on = memory_place.state_dir, _on(memory_place)
    long_ago = time.time() - 90 * 86400
    old_run = _run_dir(tmp_path, "web1", "old", long_ago)
    with memory_place.open() as memory:
        memory.record_attempt(incident_id="old", failure=nginx_failure("not_running"), attempt=_attempt(long_ago, [old_run]))
        memory.record_attempt(incident_id="new", failure=nginx_failure("not_running"), attempt=_attempt(time.time()))
    (tmp_path / "role.yml").write_text(ROLE_PLAYBOOK)

    kept = run_playbook(str(tmp_path / "role.yml"), *on["extra"], state_dir=tmp_path, env=on["env"])
    assert kept.rc == 0 and kept.recap["localhost"]["changed"] == 0, kept.output
    assert Path(old_run).is_dir()

    pruned = run_playbook(str(tmp_path / "role.yml"), *on["extra"], "-e", "autoheal_retention_days=30", state_dir=tmp_path, env=on["env"])
    assert pruned.rc == 0 and pruned.recap["localhost"]["changed"] == 1, pruned.output
    assert not Path(old_run).exists()
    with memory_place.open() as memory:
        assert [episode["incident_id"] for episode in memory.episodes()] == ["new"]
    assert _only_in_its_place(memory_place)


SWITCH = """
- hosts: localhost
  gather_facts: false
  module_defaults:
    sentinel.heal.memory: {memory_url: "{{ u }}"}
  tasks:
    - {name: nothing yet, sentinel.heal.memory: {operation: suspension, state_dir: "{{ d }}"}, register: before}
    - name: suspend in check mode
      sentinel.heal.memory: {operation: suspend, decided_by: alice, note: failover, state_dir: "{{ d }}"}
      check_mode: true
      register: would_suspend
    - {name: suspend, sentinel.heal.memory: {operation: suspend, decided_by: alice, note: failover, state_dir: "{{ d }}"}, register: thrown}
    - {name: again, sentinel.heal.memory: {operation: suspend, decided_by: bob, note: mine, state_dir: "{{ d }}"}, register: again}
    - {name: resume, sentinel.heal.memory: {operation: resume, decided_by: carol, state_dir: "{{ d }}"}, register: resumed}
    - {name: resume again, sentinel.heal.memory: {operation: resume, decided_by: carol, state_dir: "{{ d }}"}, register: resumed_again}
    - name: report
      ansible.builtin.copy:
        dest: "{{ d }}/switch.json"
        content: "{{ [before, would_suspend, thrown, again, resumed, resumed_again]
                     | map('dict2items') | map('selectattr', 'key', 'in', ['changed', 'suspended', 'suspension']) | map('items2dict')
                     | list | to_json }}"
        mode: "0600"
    - {name: a suspend without a reason, sentinel.heal.memory: {operation: suspend, decided_by: dave, note: " ", state_dir: "{{ d }}"}}
"""


def test_the_kill_switch_through_a_playbook_records_who_and_why_and_is_idempotent(memory_place: MemoryPlace) -> None:
    tmp_path, on = memory_place.state_dir, _on(memory_place)
    (tmp_path / "switch.yml").write_text(SWITCH)
    run = run_playbook(str(tmp_path / "switch.yml"), *on["extra"], state_dir=tmp_path, env=on["env"])
    assert run.rc == 2 and "note: say why healing is suspended" in run.output, run.output
    before, would, thrown, again, resumed, resumed_again = json.loads((tmp_path / "switch.json").read_text())
    assert before == {"changed": False, "suspended": False, "suspension": None}
    assert would["changed"] is True and would["suspension"] is None  # check mode threw nothing
    assert thrown["changed"] is True and (thrown["suspension"]["suspended_by"], thrown["suspension"]["reason"]) == ("alice", "failover")
    assert again["changed"] is False and again["suspension"]["suspended_by"] == "alice"
    assert resumed["changed"] is True and (resumed["suspended"], resumed["suspension"]["resumed_by"]) == (False, "carol")
    assert resumed_again == {"changed": False, "suspended": False, "suspension": None}
    assert _only_in_its_place(memory_place)


def test_silences_through_the_playbook_are_set_listed_and_lifted_with_clear_errors(memory_place: MemoryPlace) -> None:
    tmp_path, on = memory_place.state_dir, _on(memory_place)
    silence = ("playbooks/silence.yml", *on["extra"], "-e", "by=alice")
    set_run = run_playbook(*silence, "-e", "target=node1", "-e", "service=nginx", "-e", "duration=2h", "-e", "reason='disk swap'",
                           state_dir=tmp_path, env=on["env"])
    assert set_run.rc == 0 and "silence 1: node1 nginx, set by alice until" in one_line(set_run.output), set_run.output
    assert ": disk swap" in set_run.output
    nowhere = run_playbook(*silence, "-e", "target=web*", "-e", "duration=10m", "-e", "reason=later", state_dir=tmp_path, env=on["env"])
    assert nowhere.rc == 0 and "'web*' matches no host or group of this inventory; the silence is kept anyway" in one_line(nowhere.output)
    bad = run_playbook(*silence, "-e", "target=node2", "-e", "duration=soon", "-e", "reason=x", state_dir=tmp_path, env=on["env"])
    assert bad.rc == 2 and "not a duration; field: duration; value: 'soon'" in one_line(bad.output), bad.output
    shown = run_playbook("playbooks/silence.yml", *on["extra"], "-e", "show=true", state_dir=tmp_path, env=on["env"])
    assert "silences 1: node1 nginx" in one_line(shown.output) and "silences 2: web* *" in one_line(shown.output), shown.output
    lifted = run_playbook(*silence, "-e", "target=node1", "-e", "lift=true", state_dir=tmp_path, env=on["env"])
    assert lifted.rc == 0 and "unsilence 1: node1 nginx" in one_line(lifted.output), lifted.output
    with memory_place.open() as memory:
        assert [silence.hosts for silence in memory.silences(at=time.time())] == ["web*"]
    assert _only_in_its_place(memory_place)


def test_the_report_playbook_writes_the_history_and_the_audit_trail_of_the_window(memory_place: MemoryPlace) -> None:
    """playbooks/report.yml (sentinel.heal.report) on each backend: the last 7 days only, as a page and as JSON Lines."""
    import jsonschema

    tmp_path, on = memory_place.state_dir, _on(memory_place)
    with memory_place.open() as memory:
        memory.record_attempt(incident_id="this-week", failure=nginx_failure("not_running"), attempt=_attempt(time.time() - 86400))
        memory.record_attempt(incident_id="last-month", failure=nginx_failure("not_running"), attempt=_attempt(time.time() - 30 * 86400))
    page, audit = tmp_path / "history.html", tmp_path / "audit.jsonl"
    run = run_playbook("playbooks/report.yml", *on["extra"], "-e", f"dest={page}", "-e", f"audit={audit}", state_dir=tmp_path, env=on["env"])
    assert run.rc == 0, run.output
    assert f"1 incident(s) in the last 7.0 day(s): {page}; audit trail (4 records): {audit}" in one_line(run.output), run.output
    assert "1 incident(s), 1 attempt(s): 1 healed" in page.read_text()
    records = [json.loads(line) for line in audit.read_text().splitlines()]
    schema = json.loads((ROOT / "docs" / "audit-schema.json").read_text())
    for record in records:
        jsonschema.validate(record, schema)
    assert {record["incident_id"] for record in records} == {"this-week"} and _only_in_its_place(memory_place)
