"""The heal task on one host, as the action plugin starts it: what the play's own process does for the workers Ansible
forks from it (the shipped policy and runbooks parsed once there, when it loads the heal action, so that no worker parses
them again), and what of the host's failures its fleet view counts, with a real memory."""

from __future__ import annotations

import datetime
import functools
import html
import importlib
import json
import os
import re
import shlex
import time
from pathlib import Path
from typing import Any

import pytest
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.parsing.dataloader import DataLoader
from ansible.playbook.play_context import PlayContext
from ansible.plugins.loader import connection_loader
from ansible.template import Templar
from notify_cases import recording_server

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.llm import LLMError
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary, _parse_runbook_file
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import MemoryStoreError
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.incidents import FleetIncidents, FleetSettings, see
from ansible_collections.sentinel.heal.plugins.plugin_utils.fleet.silences import Silences
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import _load_policy_cached, load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Attempt, Failure
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.options import HEAL_SPEC
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.state import TaskContext
from ansible_collections.sentinel.heal.plugins.plugin_utils.notify.links import TokenKey, read_link
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.audit import append_audit, iso_utc, notification_records
from ansible_collections.sentinel.heal.plugins.plugin_utils.report.run import run_report_html
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks import loop_action
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks import memory as memory_tasks
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.heal import HealSession, _stricter_restore
from helpers import HEALTHY, NGINX_SPEC, ScriptedExecutor, _tools, nginx_failure


def test_the_shipped_files_parsed_where_the_action_loads_are_not_parsed_again_in_a_forked_worker() -> None:
    _load_policy_cached.cache_clear()
    _parse_runbook_file.cache_clear()
    importlib.reload(loop_action)  # as Ansible loads the action's class in the play's process, before it forks
    assert _load_policy_cached.cache_info().currsize == 1 and _parse_runbook_file.cache_info().currsize > 10
    read, write = os.pipe()
    pid = os.fork()
    if pid == 0:  # the worker of one host
        before = (_load_policy_cached.cache_info().misses, _parse_runbook_file.cache_info().misses)
        load_policy()
        RunbookLibrary.load()
        after = (_load_policy_cached.cache_info().misses, _parse_runbook_file.cache_info().misses)
        os.write(write, json.dumps([after[0] - before[0], after[1] - before[1]]).encode())
        os._exit(0)
    os.close(write)
    _pid, status = os.waitpid(pid, 0)
    parsed_in_the_worker = json.loads(os.read(read, 100))
    os.close(read)
    assert status == 0 and parsed_in_the_worker == [0, 0]


def _stopped(service: str) -> Failure:
    return Failure(host="web1", service=service, failure_class="not_running", summary=f"{service} is not running", evidence={},
                   spec={"name": service, "process": service})


def _session(state_dir: Path, failures: list[Failure], **options: Any) -> HealSession:
    """The heal task on web1 over Ansible's local connection, given what its check found (``failures``): nothing is
    checked, read or run on this machine (there is no action plugin to run a module through)."""
    params = dict(services=[NGINX_SPEC, *({"name": failure.service} for failure in failures if failure.service != "nginx")],
                  state_dir=str(state_dir), failures=[failure.to_dict() for failure in failures], **options)
    validated = ArgumentSpecValidator(HEAL_SPEC).validate(params)
    assert not validated.error_messages, validated.error_messages
    task = TaskContext(action=None, connection=connection_loader.get("local", PlayContext(), None), templar=Templar(loader=DataLoader()),
                       task_vars={"inventory_hostname": "web1"}, check_mode=False, diff=False, ask_operator=lambda *_: None,
                       show=lambda _line: None)
    return HealSession(validated.validated_parameters, task)


def test_with_fleet_incidents_on_a_unit_a_person_masked_or_a_service_a_person_silenced_counts_toward_none(tmp_path: Path) -> None:
    """Their decisions are theirs, not a fleet's failure: at a threshold of one host, the service this host fails opens a
    fleet incident of its own (it flaps, so nothing runs for it either), the masked nginx and the silenced redis open none."""
    now = time.time()
    with Memory(tmp_path) as memory:
        Silences(memory.database).silence(hosts="web1", service="redis", until=now + 3600, reason="migrating", by="alice", at=now)
        memory.record_attempt(incident_id="earlier", failure=_stopped("app"), attempt=Attempt(number=1, outcome="failed", started_at=now - 60))
    result = _session(tmp_path, [nginx_failure("masked"), _stopped("redis"), _stopped("app")], fleet_min_hosts=1, flap_limit=1).run()
    incidents = {incident["service"]: incident for incident in result["incidents"]}
    assert {service: incident["status"] for service, incident in incidents.items()} == {
        "nginx": "masked", "redis": "silenced", "app": "escalated"}
    assert incidents["app"]["fleet_incident"]["hosts"] == ["web1"]
    assert incidents["nginx"]["fleet_incident"] is None and incidents["redis"]["fleet_incident"] is None
    with Memory(tmp_path) as memory:
        assert [incident.service for incident in FleetIncidents(memory.database).fleet_incidents()] == ["app"]


def test_a_host_healed_before_another_job_made_its_failure_a_fleet_incident_leaves_the_incident_and_closes_it(tmp_path: Path) -> None:
    """Two slices of one heal on two nodes: web1's check saw its failure alone and healed it outside any fleet incident;
    web2's, in the other slice, met web1's sighting and opened one of both hosts. web2 healed and left it; web1's heal
    closes it, as it would have as a member."""
    settings = FleetSettings(min_hosts=2)
    with Memory(tmp_path) as memory:
        incidents = FleetIncidents(memory.database)
        alone = see(incidents, "web1", [nginx_failure("not_running", host="web1")], [], settings, run_id="slice-1", run_hosts=1, batch_hosts=1,
                    at=1000.0)
        joined = see(incidents, "web2", [nginx_failure("not_running", host="web2")], [], settings, run_id="slice-2", run_hosts=1, batch_hosts=1,
                     at=1001.0)
        assert not alone.incidents and joined.incidents["nginx"].hosts == ("web1", "web2")
        assert incidents.clear_fleet_incidents("web2", ["nginx"], at=1010.0) == []
    tools = _tools(tmp_path, ScriptedExecutor(), [HEALTHY])
    result = _session(tmp_path, [nginx_failure("not_running")]).handle([nginx_failure("not_running")], tools, alone)
    assert [incident["status"] for incident in result["incidents"]] == ["healed"]
    with Memory(tmp_path) as memory:
        [incident] = FleetIncidents(memory.database).fleet_incidents()
    assert incident.closed_at is not None and incident.hosts == ("web1", "web2")


def test_a_state_dir_that_is_a_file_fails_the_first_run_of_a_healthy_host_naming_the_path(tmp_path: Path) -> None:
    state = tmp_path / "state"
    state.write_text("")
    with pytest.raises(MemoryStoreError, match=r"^the state dir is a regular file, not a directory; field: state_dir; value: '"
                                               + re.escape(str(state)) + "'; fix: point autoheal_state_dir"):
        _session(state, []).run()


@pytest.mark.parametrize("failures", [[], [nginx_failure()]], ids=["healthy", "failing"])
def test_a_memory_file_that_is_no_database_fails_the_first_run_once_with_what_fits_a_corrupt_memory(
        tmp_path: Path, failures: list[Failure]) -> None:
    (tmp_path / "memory.sqlite3").write_bytes(b"\x00garbage where the memory was" * 10)
    with pytest.raises(MemoryStoreError) as refused:
        _session(tmp_path, failures).run()
    said = str(refused.value)
    assert said.startswith("the memory file is not a SQLite database (it begins b'\\x00garbage'): it is corrupt") and said.count("mv ") == 1
    assert "integrity_check" not in said


def test_a_healthy_host_with_a_sound_state_dir_opens_no_memory_and_makes_nothing(tmp_path: Path) -> None:
    result = _session(tmp_path / "state", []).run()
    assert result["status"] == "healthy" and list(tmp_path.iterdir()) == []


@pytest.mark.parametrize(("llm", "said"), [
    ({"model": "llama3.1", "base_url": "localhost:11434/v1"},
     "the LLM's base_url is not an http(s) URL; field: llm.base_url; value: 'localhost:11434/v1'; fix: the API's root, as "
     "http://HOST:PORT/v1"),
    ({"model": "", "base_url": "http://127.0.0.1:11434/v1"},
     "an LLM needs a model name; field: llm.model; value: ''; fix: name the model the server serves"),
], ids=["base-url-no-url", "no-model"])
def test_the_llm_settings_fail_the_first_run_of_a_healthy_host(tmp_path: Path, llm: dict[str, Any], said: str) -> None:
    with pytest.raises(LLMError) as refused:
        _session(tmp_path, [], llm=llm).run()
    assert str(refused.value).startswith(said)


def _audit_file(tmp_path: Path, result: dict[str, Any]) -> list[dict[str, Any]]:
    """The records the timeline callback appends for the task's result to the run's audit.jsonl, read back from the file."""
    audit = tmp_path / "audit.jsonl"
    append_audit([episode for incident in result["incidents"] for episode in incident["attempt_log"]], audit)
    return [json.loads(line) for line in audit.read_text().splitlines()]


def _lift(state_dir: Path, command: str) -> None:
    """Run the command a refusal names, as its module does (the module's task in memory_tasks), alice deciding."""
    module, *pairs = shlex.split(command)
    args: dict[str, Any] = {key: "alice" if value == "YOU" else value for key, value in (pair.split("=", 1) for pair in pairs)}
    if "silence_id" in args:
        args["silence_id"] = int(args["silence_id"])
    task = {"sentinel.heal.flapping_reset": memory_tasks.reset_flapping, "sentinel.heal.silence": memory_tasks.silence}[module]
    with Memory(state_dir) as memory:
        task(memory, args, check_mode=False, task_vars={})


def test_a_persons_silence_is_an_episode_and_an_audit_record_naming_it_until_when_and_the_command_that_lifts_it(tmp_path: Path) -> None:
    now = time.time()
    with Memory(tmp_path) as memory:
        silence = Silences(memory.database).silence(hosts="web*", service="nginx", until=now + 7200, reason="disk swap", by="alice", at=now)
    result = _session(tmp_path, [nginx_failure()]).run()
    [incident] = result["incidents"]
    lift = f"sentinel.heal.silence state=absent silence_id={silence.id} decided_by=YOU"
    assert (incident["status"], incident["attempts"], result["changed"]) == ("silenced", 0, False)
    [summary] = result["summary"]
    assert summary.startswith(f"web1: nginx silenced: nginx: silenced by alice (silence {silence.id}): disk swap; checked, nothing "
                              "planned or run; the silence limit holds until "), summary
    assert re.search(rf", in (1 h 59 min|2 h); to lift it now: {re.escape(lift)}$", summary), summary
    with Memory(tmp_path) as memory:
        [episode] = memory.episodes()
    assert (episode["outcome"], [episode["id"]]) == ("silenced", incident["episodes"])
    kinds = [(record["kind"], record["episode_id"]) for record in _audit_file(tmp_path, result)]
    assert kinds == [("incident_opened", episode["id"]), ("evidence", episode["id"]), ("outcome", episode["id"])]
    outcome = _audit_file(tmp_path, result)[-1]["detail"]
    assert outcome["outcome"] == "silenced" and outcome["limit"] == {
        "name": "silence", "said": f"silenced by alice (silence {silence.id}): disk swap", "until": iso_utc(now + 7200), "ends": "",
        "lift": lift}
    page = html.unescape(run_report_html({"web1": result}, title="run"))
    assert re.search(r"next: Nothing ran on web1: the silence limit holds nginx until \S+, in (1 h 59 min|2 h) \(the first run after that takes it "
                     rf"up\)\. To lift it now: {re.escape(lift)}", page), page
    _lift(tmp_path, lift)  # the command works as written
    with Memory(tmp_path) as memory:
        assert Silences(memory.database).silence_over("web1", (), "nginx", at=time.time()) is None


def test_the_flapping_limit_is_an_episode_and_an_audit_record_and_the_report_says_reset_it_not_fix_it_by_hand(tmp_path: Path) -> None:
    now = time.time()
    with Memory(tmp_path) as memory:
        memory.record_attempt(incident_id="earlier", failure=nginx_failure(),
                              attempt=Attempt(number=1, outcome="healed", verified=True, started_at=now - 600, finished_at=now - 590))
    result = _session(tmp_path, [nginx_failure()], flap_limit=1, relapse_window=300).run()  # the heal is no relapse's: 10 min ago
    [incident] = result["incidents"]
    lift = "sentinel.heal.flapping_reset host=web1 service=nginx decided_by=YOU"
    assert (incident["status"], incident["attempts"]) == ("escalated", 0)
    assert re.search(r"^web1: nginx escalated: nginx: flapping: remediated 1 times in the last 60 min \(episodes 1; the limit is 1: "
                     r"flap_limit=1, flap_window=3600\); nothing runs; the flapping limit holds until \S+, in (49 min \d+ s|50 min); "
                     rf"to lift it now: {re.escape(lift)}$", result["summary"][0]), result["summary"]
    with Memory(tmp_path) as memory:
        assert [(episode["id"], episode["outcome"]) for episode in memory.episodes()] == [(2, "flapping"), (1, "healed")]
        assert [row["id"] for row in memory.remediations("web1", "nginx", since=0)] == [1]  # the refusal is none
    [opened, _evidence, outcome] = _audit_file(tmp_path, result)
    assert opened["kind"] == "incident_opened" and opened["episode_id"] == 2
    assert outcome["detail"]["outcome"] == "flapping" and outcome["detail"]["limit"]["until"] == iso_utc(now - 600 + 3600)
    assert outcome["detail"]["limit"]["lift"] == lift
    page = html.unescape(run_report_html({"web1": result}, title="run"))
    assert "next: Nothing ran on web1: the flapping limit holds nginx until " in page and f"To lift it now: {lift}" in page
    assert "by hand" not in page
    _lift(tmp_path, lift)
    with Memory(tmp_path) as memory:
        assert memory.remediations("web1", "nginx", since=0) == []


def test_a_declared_maintenance_window_says_when_it_ends_and_where_it_is_declared(tmp_path: Path) -> None:
    now = int(time.time())
    stamp = functools.partial(datetime.datetime.fromtimestamp, tz=datetime.UTC)
    window = {"name": "patching", "from": stamp(now - 60).isoformat(), "until": stamp(now + 1800).isoformat()}
    result = _session(tmp_path, [nginx_failure()], maintenance_windows=[window]).run()
    [incident] = result["incidents"]
    assert incident["status"] == "silenced" and incident["limit"]["limit"] == "maintenance_window"
    assert re.search(r"the maintenance_window limit holds until \S+, in (29 min \d+ s|30 min); to lift it now: take the window "
                     r"'patching' out of autoheal_maintenance_windows \(the heal's maintenance_windows\) in the inventory$", incident["reason"])
    outcome = _audit_file(tmp_path, result)[-1]["detail"]
    assert outcome["outcome"] == "silenced" and outcome["limit"]["until"] == iso_utc(now + 1800)


@pytest.mark.parametrize(("host", "controller", "planned"), [
    ("approve", "auto", "approve"),  # auto on the controller only: the host would refuse it unsigned, so a person is asked
    ("auto", "approve", "approve"),  # the controller's stricter word holds too
    ("auto", "auto", "auto"),
    ("off", "auto", "off"),
    (None, "auto", "approve"),  # a host whose role predates the setting in its check: its default
])
def test_a_restore_through_the_executor_is_planned_within_the_stricter_of_the_hosts_setting_and_the_controllers(
        host: str | None, controller: str, planned: str) -> None:
    raw = {"name": "nginx", "spec": {"name": "nginx", "restore_known_good": host}}
    assert _stricter_restore(raw, controller)["spec"]["restore_known_good"] == planned


@pytest.mark.parametrize(("fleet_min_hosts", "told"), [(0, "escalated"), (1, "fleet_opened")], ids=["alone", "fleet-of-one"])
def test_the_heal_tells_its_destinations_once_its_outcome_is_final_and_records_one_that_fails(
        tmp_path: Path, fleet_min_hosts: int, told: str) -> None:
    """An escalation (the flapping limit: nothing runs): alone, one escalated message; in a fleet incident of one host,
    the fleet incident's message, which names it (nothing ran on it). The destination that answers gets it once; the
    one that fails is retried, then a warning - on the incident, or of the task for a fleet message - and a notification
    record; never an error."""
    now = time.time()
    with Memory(tmp_path) as memory:
        memory.record_attempt(incident_id="earlier", failure=_stopped("app"), attempt=Attempt(number=1, outcome="failed", started_at=now - 60))
    with recording_server() as recorder:
        recorder.status["/down"] = 503
        notify = [{"type": "webhook", "url": f"{recorder.url}/hook"},
                  {"type": "slack", "name": "ops chat", "url": f"{recorder.url}/down", "retries": 1}]
        result = _session(tmp_path, [_stopped("app")], fleet_min_hosts=fleet_min_hosts, flap_limit=1, notify=notify).run()
    [incident] = result["incidents"]
    assert incident["status"] == "escalated"
    assert [body["event"] for body in recorder.bodies("/hook")] == [told]
    assert len(recorder.bodies("/down")) == 2  # one message, tried twice
    failed = f"notification {told} to ops chat not delivered after 2 tries: HTTP 503 Service Unavailable"
    assert failed in (incident["warnings"] if told == "escalated" else result["warnings"])
    records = notification_records("web1", result["notifications"], now)
    assert [(record["detail"]["destination"], record["detail"]["delivered"]) for record in records] == [
        ("notify[0] (webhook)", True), ("ops chat", False)]
    assert recorder.url not in json.dumps(result)


LINK_SECRET = "an approval link secret of forty characters"


def test_a_waiting_plans_message_links_the_stored_plan_signed_until_it_expires(tmp_path: Path) -> None:
    """Under a policy that allows nothing, the stale pid's plan waits: its message carries the link of exactly the plan
    the memory holds (its id, hash, host and expiry), and the link secret never reaches the destination."""
    policy = tmp_path / "nothing-allowed.yml"
    policy.write_text("version: 1\n")
    with recording_server() as recorder:
        result = _session(tmp_path, [nginx_failure()], policy=str(policy), notify=[{"type": "webhook", "url": f"{recorder.url}/hook"}],
                          approval_page_url="https://approvals.example.com", approval_link_secret=LINK_SECRET).run()
    [incident] = result["incidents"]
    assert incident["status"] == "awaiting_approval"
    [body] = recorder.bodies("/hook")
    token = body["approval_url"].removeprefix("https://approvals.example.com/approve?t=")
    with Memory(tmp_path) as memory:
        row = memory.plan(incident["plan_id"])
    assert row is not None
    claim = read_link(TokenKey(LINK_SECRET), token, now=time.time())
    assert (claim.plan_id, claim.plan_hash, claim.host, claim.expires_at) == (row["plan_id"], row["plan_hash"], "web1", int(row["expires_at"]))
    assert body["expires_at"] == row["expires_at"] and LINK_SECRET not in json.dumps(body) + json.dumps(result)


def test_a_plan_with_a_step_the_policy_keeps_out_of_chat_has_no_link_and_its_message_says_approve_yml(tmp_path: Path) -> None:
    policy = tmp_path / "start-by-hand.yml"
    policy.write_text("version: 1\nrules:\n  - {id: start-by-hand, executable: service, argv: ['{init_service}', start], decision: approve,"
                      " approve_from_chat: false}\n")
    with recording_server() as recorder:
        _session(tmp_path, [nginx_failure()], policy=str(policy), notify=[{"type": "webhook", "url": f"{recorder.url}/hook"}],
                 approval_page_url="https://approvals.example.com", approval_link_secret=LINK_SECRET).run()
    [body] = recorder.bodies("/hook")
    facts = {fact["label"]: fact["text"] for fact in body["facts"]}
    assert body["event"] == "awaiting_approval" and body["approval_url"] is None
    assert "start-by-hand" in facts["Not from chat"] and "approve.yml only" in facts["Not from chat"]
