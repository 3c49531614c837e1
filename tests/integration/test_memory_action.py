"""The memory's modules (memory_info, memory_export, memory_prune, silence, suspension, approval, flapping_reset)
through ansible-playbook, on a memory filled by the engine (no lab needed): on each backend, the SQLite file in the state
dir and a PostgreSQL database (memory_url, the password in PGPASSWORD as an AWX credential gives it). Every write module
in check mode leaves the memory as it was; the deprecated sentinel.heal.memory still works, naming what replaces it."""

from __future__ import annotations

import dataclasses
import json
import os
import sys
import time
from pathlib import Path
from typing import Any

from conftest import ROOT, one_line, run_playbook
from memory_places import MemoryPlace

sys.path.insert(0, str(ROOT / "tests" / "unit" / "plugins" / "plugin_utils"))

from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import FleetIncidents, FleetSettings, sighting_of
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.kill_switch import KillSwitch
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.silences import Silences
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, PendingPlan, Plan, PlanSource, Step
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import MEMORY_FILE
from helpers import nginx_failure

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  module_defaults:
    sentinel.heal.memory_info: {memory_url: "{{ u }}", state_dir: "{{ d }}"}
    sentinel.heal.memory_export: {memory_url: "{{ u }}", state_dir: "{{ d }}"}
    sentinel.heal.memory_prune: {memory_url: "{{ u }}", state_dir: "{{ d }}"}
  tasks:
    - {name: list, sentinel.heal.memory_info: {service: nginx}, register: listed}
    - {name: search, sentinel.heal.memory_info: {text: "Address already in use"}, register: found}
    - {name: show, sentinel.heal.memory_info: {episode_id: "{{ found.episodes[0].id }}"}, register: shown}
    - name: export in check mode
      sentinel.heal.memory_export: {dest: "{{ d }}/export.json"}
      check_mode: true
      register: would_export
    - {name: nothing exported yet, ansible.builtin.stat: {path: "{{ d }}/export.json"}, register: not_yet}
    - {name: export, sentinel.heal.memory_export: {dest: "{{ d }}/export.json"}, register: exported}
    - name: prune in check mode
      sentinel.heal.memory_prune: {older_than_days: 30}
      check_mode: true
      register: would_prune
    - {name: prune, sentinel.heal.memory_prune: {older_than_days: 30}, register: pruned}
    - name: forget in check mode
      sentinel.heal.memory_prune: {fingerprint: "{{ shown.episode.fingerprint }}"}
      check_mode: true
      register: would_forget
    - {name: forget, sentinel.heal.memory_prune: {fingerprint: "{{ shown.episode.fingerprint }}"}, register: forgot}
    - {name: after, sentinel.heal.memory_info: {}, register: after}
    - {name: fleet incidents, sentinel.heal.memory_info: {kind: fleet_incidents}, register: fleet}
    - name: report
      ansible.builtin.copy:
        dest: "{{ d }}/report.json"
        content: "{{ {'listed': listed.episodes | length, 'found': found.episodes[0].error_text, 'shown': shown.episode.plan.source,
                     'would_export': [would_export.changed, would_export.count, not_yet.stat.exists],
                     'exported': exported.count, 'would_prune': [would_prune.removed, would_prune.runs_removed],
                     'pruned': pruned.removed, 'runs_removed': pruned.runs_removed,
                     'would_forget': [would_forget.changed, would_forget.removed], 'forgot': forgot.removed,
                     'left': after.episodes | map(attribute='error_text') | list,
                     'fleet': fleet.fleet_incidents | map(attribute='hosts') | list} | to_json }}"
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


def test_the_queries_exports_and_pruning_through_a_playbook(memory_place: MemoryPlace) -> None:
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
        # two hosts whose nginx failed alike, counted as one fleet incident (at two hosts here)
        for host in ("web1", "web2"):
            sighting = sighting_of(nginx_failure("not_running", host=host), run_id="run-1", at=time.time())
            FleetIncidents(memory.database).report_check(host, [sighting], [], at=sighting.seen_at)
            FleetIncidents(memory.database).fleet_incident_of(sighting, FleetSettings(min_hosts=2), run_hosts=2)
    (tmp_path / "memory.yml").write_text(PLAYBOOK)
    run = run_playbook(str(tmp_path / "memory.yml"), *on["extra"], state_dir=tmp_path, env=on["env"])
    assert run.rc == 0, run.output
    report = json.loads((tmp_path / "report.json").read_text())
    assert report == {"listed": 3, "found": bind.summary, "shown": "runbook", "would_export": [True, 3, False], "exported": 3,
                      "would_prune": [1, 2], "pruned": 1, "runs_removed": 2, "would_forget": [True, 1], "forgot": 1, "left": [old.summary],
                      "fleet": [["web1", "web2"]]}
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
    sentinel.heal.memory_info: {memory_url: "{{ u }}", state_dir: "{{ d }}"}
    sentinel.heal.suspension: {memory_url: "{{ u }}", state_dir: "{{ d }}"}
  tasks:
    - {name: nothing yet, sentinel.heal.memory_info: {kind: suspension}, register: before}
    - name: suspend in check mode
      sentinel.heal.suspension: {decided_by: alice, note: failover}
      check_mode: true
      register: would_suspend
    - {name: suspend, sentinel.heal.suspension: {decided_by: alice, note: failover}, register: thrown}
    - {name: again, sentinel.heal.suspension: {decided_by: bob, note: mine}, register: again}
    - name: resume in check mode
      sentinel.heal.suspension: {state: absent, decided_by: carol}
      check_mode: true
      register: would_resume
    - {name: resume, sentinel.heal.suspension: {state: absent, decided_by: carol}, register: resumed}
    - {name: resume again, sentinel.heal.suspension: {state: absent, decided_by: carol}, register: resumed_again}
    - name: report
      ansible.builtin.copy:
        dest: "{{ d }}/switch.json"
        content: "{{ [before, would_suspend, thrown, again, would_resume, resumed, resumed_again]
                     | map('dict2items') | map('selectattr', 'key', 'in', ['changed', 'suspended', 'suspension']) | map('items2dict')
                     | list | to_json }}"
        mode: "0600"
    - {name: a suspend without a reason, sentinel.heal.suspension: {decided_by: dave, note: " "}}
"""


def test_the_kill_switch_through_a_playbook_records_who_and_why_and_is_idempotent(memory_place: MemoryPlace) -> None:
    tmp_path, on = memory_place.state_dir, _on(memory_place)
    (tmp_path / "switch.yml").write_text(SWITCH)
    run = run_playbook(str(tmp_path / "switch.yml"), *on["extra"], state_dir=tmp_path, env=on["env"])
    assert run.rc == 2 and "note: say why healing is suspended" in run.output, run.output
    before, would, thrown, again, would_resume, resumed, resumed_again = json.loads((tmp_path / "switch.json").read_text())
    assert before == {"changed": False, "suspended": False, "suspension": None}
    assert would["changed"] is True and would["suspension"] is None  # check mode threw nothing
    assert thrown["changed"] is True and (thrown["suspension"]["suspended_by"], thrown["suspension"]["reason"]) == ("alice", "failover")
    assert again["changed"] is False and again["suspension"]["suspended_by"] == "alice"
    # check mode released nothing: the switch it would release is still alice's, and the real resume below ends it
    assert would_resume["changed"] is True and (would_resume["suspended"], would_resume["suspension"]["resumed_by"]) == (True, None)
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
        assert [silence.hosts for silence in Silences(memory.database).silences(at=time.time())] == ["web*"]
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


WRITES = """
- hosts: localhost
  gather_facts: false
  module_defaults:
    sentinel.heal.silence: &memory {memory_url: "{{ u }}", state_dir: "{{ d }}"}
    sentinel.heal.suspension: *memory
    sentinel.heal.approval: *memory
    sentinel.heal.flapping_reset: *memory
    sentinel.heal.memory_prune: *memory
    sentinel.heal.memory_export: *memory
  tasks:
    - {name: silence, sentinel.heal.silence: {host: web1, service: redis, duration: 1h, decided_by: alice, note: swap}, register: silenced}
    - {name: lift, sentinel.heal.silence: {state: absent, host: web1, decided_by: alice}, register: lifted}
    - {name: suspend, sentinel.heal.suspension: {decided_by: alice, note: failover}, register: suspended}
    - {name: resume, sentinel.heal.suspension: {state: absent, decided_by: alice}, register: resumed}
    - {name: deny, sentinel.heal.approval: {plan_id: "{{ p }}", decision: denied, decided_by: alice}, register: denied}
    - {name: reset, sentinel.heal.flapping_reset: {host: web1, service: nginx, decided_by: alice}, register: reset}
    - {name: prune, sentinel.heal.memory_prune: {older_than_days: 30}, register: pruned}
    - {name: forget, sentinel.heal.memory_prune: {fingerprint: "{{ f }}"}, register: forgot}
    - {name: export, sentinel.heal.memory_export: {dest: "{{ d }}/episodes.json"}, register: exported}
    - {name: audit, sentinel.heal.memory_export: {format: audit, dest: "{{ d }}/audit.jsonl"}, register: audited}
    - {name: history, sentinel.heal.memory_export: {format: history, dest: "{{ d }}/history.html"}, register: history}
    - name: report
      ansible.builtin.copy:
        dest: "{{ d }}/writes.json"
        content: "{{ dict(['silenced', 'lifted', 'suspended', 'resumed', 'denied', 'reset', 'pruned', 'forgot', 'exported', 'audited',
                           'history'] | zip([silenced, lifted, suspended, resumed, denied, reset, pruned, forgot, exported, audited, history]))
                     | to_json }}"
        mode: "0600"
      check_mode: false
"""


def _held(memory: Any) -> dict[str, Any]:
    """Everything the write modules could change: episodes, plans, silences, the kill switch, the flapping count."""
    return {"episodes": memory.episodes(limit=1000), "plans": memory.plans(status=None),
            "silences": [silence.to_dict() for silence in Silences(memory.database).silences(at=time.time())],
            "suspension": KillSwitch(memory.database).suspension(),
            "remediations": memory.remediations("web1", "nginx", since=0)}


def test_every_write_module_in_check_mode_changes_nothing_and_says_what_would_change(memory_place: MemoryPlace) -> None:
    tmp_path, on = memory_place.state_dir, _on(memory_place)
    long_ago = time.time() - 90 * 86400
    old_run = _run_dir(tmp_path, "web1", "old", long_ago)
    waiting = nginx_failure("port_conflict", owner={"port": 80, "pid": 4242, "process": "python3", "cmdline": "x"})
    with memory_place.open() as memory:
        memory.record_attempt(incident_id="new", failure=nginx_failure("not_running"), attempt=_attempt(time.time()))
        memory.record_attempt(incident_id="old", failure=nginx_failure("not_running"), attempt=_attempt(long_ago, [old_run]))
        _episode, plan_id = memory.record_attempt(
            incident_id="waiting", failure=waiting, attempt=dataclasses.replace(_attempt(time.time()), outcome="awaiting_approval", verified=False),
            pending=PendingPlan(plan_hash="h", policy_file="p.yml", created_at=time.time(), expires_at=time.time() + 3600))
        Silences(memory.database).silence(hosts="web1", service="nginx", until=time.time() + 3600, reason="disk swap", by="bob", at=time.time())
        held = _held(memory)
    (tmp_path / "writes.yml").write_text(WRITES)
    run = run_playbook(str(tmp_path / "writes.yml"), *on["extra"], "-e", f"p={plan_id}", "-e", f"f={waiting.fingerprint}", "--check",
                       state_dir=tmp_path, env=on["env"])
    assert run.rc == 0, run.output
    said = json.loads((tmp_path / "writes.json").read_text())
    assert {name: result["changed"] for name, result in said.items()} == {
        "silenced": True, "lifted": True, "suspended": True, "resumed": False, "denied": True, "reset": True, "pruned": True,
        "forgot": True, "exported": True, "audited": True, "history": True}
    assert said["silenced"]["silences"] == [] and [s["reason"] for s in said["lifted"]["silences"]] == ["disk swap"]
    assert said["suspended"]["suspension"] is None and said["denied"]["plan"]["status"] == "pending"
    assert (said["pruned"]["removed"], said["pruned"]["runs_removed"], said["forgot"]["removed"]) == (1, 1, 1)
    # the history's window is the last 7 days: the old episode is not in it
    assert (said["exported"]["count"], said["history"]["episode_count"]) == (3, 2) and said["audited"]["count"] > 3
    with memory_place.open() as memory:
        assert _held(memory) == held
    assert Path(old_run).is_dir() and not [name for name in ("episodes.json", "audit.jsonl", "history.html") if (tmp_path / name).exists()]
    assert _only_in_its_place(memory_place)


REFUSED = """
- hosts: localhost
  gather_facts: false
  tasks:
    - {name: a plan among episodes, sentinel.heal.memory_info: {plan_id: abc, state_dir: "{{ d }}", memory_url: "{{ u }}"}, ignore_errors: true}
    - name: a host filter on the audit trail
      sentinel.heal.memory_export: {format: audit, host: web1, state_dir: "{{ d }}", memory_url: "{{ u }}"}
      ignore_errors: true
    - name: a denial of no plan
      sentinel.heal.approval: {plan_id: nope, decision: denied, decided_by: alice, state_dir: "{{ d }}", memory_url: "{{ u }}"}
      ignore_errors: true
    - name: a search that filters
      sentinel.heal.memory_info: {text: bind, host: web1, state_dir: "{{ d }}", memory_url: "{{ u }}"}
      ignore_errors: true
    - {name: prune and forget at once, sentinel.heal.memory_prune: {older_than_days: 1, fingerprint: x, state_dir: "{{ d }}"}, ignore_errors: true}
    - {name: a silence of nothing, sentinel.heal.silence: {state: absent, decided_by: alice, state_dir: "{{ d }}"}, ignore_errors: true}
"""


def test_an_option_that_would_do_nothing_fails_the_task_naming_it(memory_place: MemoryPlace) -> None:
    tmp_path, on = memory_place.state_dir, _on(memory_place)
    (tmp_path / "refused.yml").write_text(REFUSED)
    said = one_line(run_playbook(str(tmp_path / "refused.yml"), *on["extra"], state_dir=tmp_path, env=on["env"]).output)
    assert "plan_id: 'abc' applies to kind plans only, not to kind episodes" in said, said
    assert "host: 'web1' applies to format episodes only, not to format audit" in said, said
    assert "no such plan; field: plan_id; value: 'nope'" in said, said
    assert "parameters are mutually exclusive: text|host" in said, said
    assert "parameters are mutually exclusive: older_than_days|fingerprint" in said, said
    assert "state is absent but any of the following are missing: host, silence_id" in said, said


OLD_FORMS = """
- hosts: localhost
  gather_facts: false
  module_defaults:
    sentinel.heal.memory: {memory_url: "{{ u }}", state_dir: "{{ d }}"}
  tasks:
    - {name: silence, sentinel.heal.memory: {operation: silence, host: web1, duration: 1h, decided_by: alice, note: swap}, register: silenced}
    - {name: silences, sentinel.heal.memory: {operation: silences}, register: listed}
    - {name: unsilence, sentinel.heal.memory: {operation: unsilence, host: web1, decided_by: alice}, register: lifted}
    # options an operation does not read are ignored, as they always were
    - {name: episodes, sentinel.heal.memory: {operation: episodes, service: nginx, days: 3, plan_id: x}, register: episodes}
    - {name: audit, sentinel.heal.memory: {operation: export, format: audit, host: web9}, register: audit}
    - {name: reset, sentinel.heal.memory: {operation: reset_flapping, host: web1, service: nginx, decided_by: alice}, register: reset}
    - name: report
      ansible.builtin.copy:
        dest: "{{ d }}/old.json"
        content: "{{ {'silenced': silenced.silences | map(attribute='hosts') | list, 'listed': listed.silences | length,
                     'lifted': [lifted.changed, lifted.silences[0].lifted_by], 'episodes': episodes.episodes | length,
                     'audit': audit.records | map(attribute='kind') | unique | sort, 'reset': reset.changed} | to_json }}"
        mode: "0600"
"""


def test_the_deprecated_memory_module_still_works_and_names_the_module_that_replaces_each_operation(memory_place: MemoryPlace) -> None:
    tmp_path, on = memory_place.state_dir, _on(memory_place)
    with memory_place.open() as memory:
        memory.record_attempt(incident_id="new", failure=nginx_failure("not_running"), attempt=_attempt(time.time()))
    (tmp_path / "old.yml").write_text(OLD_FORMS)
    run = run_playbook(str(tmp_path / "old.yml"), *on["extra"], state_dir=tmp_path, env=on["env"])
    assert run.rc == 0, run.output
    assert json.loads((tmp_path / "old.json").read_text()) == {
        "silenced": ["web1"], "listed": 1, "lifted": [True, "alice"], "episodes": 1,
        "audit": ["evidence", "incident_opened", "outcome", "plan"], "reset": True}
    said = one_line(run.output)
    for warning in ("operation=silence: use sentinel.heal.silence (state: present)",
                    "operation=silences: use sentinel.heal.memory_info (kind: silences)",
                    "operation=unsilence: use sentinel.heal.silence (state: absent)",
                    "operation=episodes: use sentinel.heal.memory_info (kind: episodes)",
                    "operation=export: use sentinel.heal.memory_export (format: audit)",
                    "operation=reset_flapping: use sentinel.heal.flapping_reset"):
        assert f"[DEPRECATION WARNING]: {warning}. This feature will be removed from collection 'sentinel.heal' version 1.0.0" in said, warning
    assert "sentinel.heal.memory has been deprecated. Use the module named for what it does" in said, said
    assert _only_in_its_place(memory_place)
