"""playbooks/awx_configure.yml: the AWX job templates, survey and workflow of sentinel.heal, as code.

AWX itself cannot run here, so the playbook is checked as far as anything short of a controller can: Ansible's
syntax check and ansible-lint with the real awx.awx collection (tests/platform/awx_collection.py), and every awx.awx
task's arguments, templated as ansible-playbook templates them, validated against the argument spec the module
itself builds (Ansible's ArgumentSpecValidator, as AnsibleModule validates) and against the documented suboptions of
its dict options; the surveys by AWX's own rules for survey specs. A wrong field must fail: the mutations below.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path
from typing import Any

import jinja2.sandbox
import pytest
import yaml
from ansible.module_utils.common.arg_spec import ArgumentSpecValidator
from ansible.parsing.dataloader import DataLoader
from ansible.template import Templar, trust_as_template
from guides import code_block

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
PLAYBOOK = ROOT / "playbooks" / "awx_configure.yml"
HELPER = Path(__file__).with_name("playbook_args.py")
MINIMAL = {"autoheal_awx_inventory": "web"}
# every optional object too (execution environment, project, credentials, the memory on PostgreSQL), so that every
# task's arguments are checked
FULL = {
    "autoheal_awx_inventory": "web",
    "autoheal_awx_organization": "Operations",
    "autoheal_awx_credentials": ["web ssh"],
    "autoheal_awx_project": "ops",
    "autoheal_awx_project_url": "https://git.example.com/ops.git",
    "autoheal_awx_execution_environment": "sentinel-heal",
    "autoheal_awx_execution_environment_image": "registry.example.com/sentinel-heal-ee:0.1.0",
    "autoheal_awx_memory_url": "postgresql://sentinel@db.example.com:5432/sentinel_heal",
    "autoheal_awx_memory_password": "change-me",
    "autoheal_awx_notify": [{"type": "slack", "name": "ops chat", "url": "https://hooks.slack.com/services/T0/B0/XXXXXXXX"},
                            {"type": "pagerduty", "routing_key": "R0UTINGKEY0123456789", "events": ["escalated", "approved", "denied"]}],
}
# AWX's rules for a survey spec (awx/api/views: survey spec validation; SURVEY_TYPE_MAPPING)
SURVEY_TYPES: dict[str, Any] = {"text": str, "textarea": str, "password": str, "multiplechoice": str, "multiselect": str,
                                "integer": int, "float": (float, int)}
QUESTION_FIELDS = {"question_name", "question_description", "variable", "type", "required", "default", "min", "max", "choices", "new_question"}


def awx_env(awx_collections: Path) -> dict[str, str]:
    return {**os.environ, "ANSIBLE_CONFIG": str(ROOT / "ansible.cfg"),
            "ANSIBLE_COLLECTIONS_PATH": os.pathsep.join([str(awx_collections), str(ROOT / ".collections")])}


def analysis(playbook: Path, extra_vars: dict[str, Any], awx_collections: Path) -> dict[str, Any]:
    """tests/platform/playbook_args.py: the tasks' templated arguments and the modules' argument specs and docs."""
    result = subprocess.run([sys.executable, str(HELPER), str(playbook), json.dumps(extra_vars)], check=True,
                            capture_output=True, text=True, env=awx_env(awx_collections), cwd=ROOT)
    return json.loads(result.stdout)  # type: ignore[no-any-return]


def doc_spec(options: dict[str, Any]) -> dict[str, Any]:
    """An argument spec from documented options (for dict options whose code checks only that they are dicts)."""
    keys = ("type", "required", "choices", "elements", "default", "aliases")
    spec = {}
    for name, option in options.items():
        spec[name] = {key: option[key] for key in keys if key in option}
        if option.get("suboptions"):
            spec[name]["options"] = doc_spec(option["suboptions"])
    return spec


def survey_problems(survey: Any) -> list[str]:
    if not isinstance(survey, dict):
        return ["the survey spec is not a dict"]
    problems = [f"'{key}' missing from survey spec" for key, kind in (("name", str), ("description", str), ("spec", list))
                if not isinstance(survey.get(key), kind)]
    variables = set()
    for index, question in enumerate(survey.get("spec") or []):
        if not isinstance(question, dict):
            problems.append(f"survey question {index} is not an object")
            continue
        for field, kind in (("type", str), ("question_name", str), ("variable", str), ("required", bool)):
            if not isinstance(question.get(field), kind):
                problems.append(f"'{field}' missing from survey question {index} or not a {kind.__name__}")
        if question.get("variable") in variables:
            problems.append(f"'variable' '{question['variable']}' duplicated in survey question {index}")
        variables.add(question.get("variable"))
        kind = SURVEY_TYPES.get(question.get("type"))
        if kind is None:
            problems.append(f"'{question.get('type')}' in survey question {index} is not one of the allowed types {sorted(SURVEY_TYPES)}")
            continue
        default = question.get("default", "")
        if default != "" and (not isinstance(default, kind) or isinstance(default, bool)):
            problems.append(f"default value {default!r} in survey question {index} expected to be {question['type']}")
        for limit in ("min", "max"):
            if question.get(limit) is not None and not isinstance(question[limit], int):
                problems.append(f"the {limit} limit in survey question {index} expected to be integer")
        if isinstance(question.get("min"), int) and isinstance(question.get("max"), int) and default != "":
            measure = len(default) if isinstance(default, str) else default
            if not question["min"] <= measure <= question["max"]:
                problems.append(f"default value {default!r} in survey question {index} outside min/max")
        unknown = set(question) - QUESTION_FIELDS
        if unknown:
            problems.append(f"survey question {index} has unknown fields {sorted(unknown)}")
    return problems


def problems_of(result: dict[str, Any]) -> list[str]:
    """Everything the awx.awx modules (and AWX's survey rules) would refuse in the playbook's tasks."""
    problems = []
    for task in result["tasks"]:
        action, args = task["action"], task["args"]
        if not action.startswith("awx.awx."):
            continue
        spec = result["specs"][action]
        checks = {key: value for key, value in spec.items() if key != "argument_spec"}
        validated = ArgumentSpecValidator(spec["argument_spec"], **checks).validate(args)
        problems += [f"{task['name']}: {message}" for message in validated.error_messages]
        for name, option in result["docs"][action].items():
            if option.get("suboptions") and isinstance(args.get(name), dict):
                sub = ArgumentSpecValidator(doc_spec(option["suboptions"])).validate(args[name])
                problems += [f"{task['name']}: {name}: {message}" for message in sub.error_messages]
        if args.get("survey_spec") is not None or args.get("survey_enabled"):
            problems += [f"{task['name']}: {message}" for message in survey_problems(args.get("survey_spec"))]
    return problems


@pytest.fixture(scope="module")
def configured(awx_collections: Path) -> dict[str, Any]:
    return analysis(PLAYBOOK, FULL, awx_collections)


def tasks_of(result: dict[str, Any], action: str) -> list[dict[str, Any]]:
    return [task["args"] for task in result["tasks"] if task["action"] == action]


def test_syntax_check(awx_collections: Path) -> None:
    subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", str(PLAYBOOK)], check=True, capture_output=True, text=True,
                   env=awx_env(awx_collections), cwd=ROOT)


def test_ansible_lint(awx_collections: Path) -> None:
    lint = subprocess.run([str(BIN / "ansible-lint"), "--offline", "--nocolor", str(PLAYBOOK.relative_to(ROOT))], check=False, capture_output=True,
                          text=True, env=awx_env(awx_collections), cwd=ROOT)
    assert lint.returncode == 0, lint.stdout + lint.stderr


@pytest.mark.parametrize("extra_vars", [MINIMAL, FULL], ids=["minimal", "full"])
def test_every_awx_task_passes_its_modules_argument_validation(awx_collections: Path, extra_vars: dict[str, Any]) -> None:
    result = analysis(PLAYBOOK, extra_vars, awx_collections)
    assert {task["action"] for task in result["tasks"]} >= {
        "awx.awx.job_template", "awx.awx.workflow_job_template", "awx.awx.workflow_job_template_node"}
    assert problems_of(result) == []


@pytest.mark.parametrize(("original", "wrong", "named"), [
    ('        playbook: "{{ autoheal_awx_heal_playbook }}"', '        playbok: "{{ autoheal_awx_heal_playbook }}"', "playbok"),
    ("        job_type: check", "        job_type: dry_run", "job_type"),
    ("        ask_limit_on_launch: true", "        ask_limit_on_launch: sometimes", "ask_limit_on_launch"),
    ("          timeout: ", "          timout: ", "timout"),
    ("          type: integer", "          type: number", "number"),
    ("        unified_job_template: \"{{ autoheal_awx_name }} approve\"",
     "        unified_job_template: \"{{ autoheal_awx_name }} approve\"\n        approval_node: {name: twice}", "mutually exclusive"),
], ids=["unknown-field", "bad-choice", "not-a-bool", "unknown-suboption", "survey-type", "exclusive-fields"])
def test_a_wrong_field_fails(tmp_path: Path, awx_collections: Path, original: str, wrong: str, named: str) -> None:
    text = PLAYBOOK.read_text(encoding="utf-8")
    assert original in text
    broken = tmp_path / "awx_configure.yml"
    broken.write_text(text.replace(original, wrong, 1), encoding="utf-8")
    problems = problems_of(analysis(broken, FULL, awx_collections))
    assert any(named in problem for problem in problems), problems


def test_job_templates(configured: dict[str, Any]) -> None:
    templates = {args["name"]: args for args in tasks_of(configured, "awx.awx.job_template")}
    heal, check, approve = templates["sentinel.heal heal"], templates["sentinel.heal heal (check)"], templates["sentinel.heal approve"]
    assert (heal["job_type"], check["job_type"], approve["job_type"]) == ("run", "check", "run")
    assert heal["playbook"] == check["playbook"] == "playbooks/heal.yml" and approve["playbook"] == "playbooks/approve.yml"
    assert (ROOT / heal["playbook"]).is_file() and (ROOT / approve["playbook"]).is_file()
    for template in templates.values():
        assert (template["inventory"], template["project"], template["organization"]) == ("web", "ops", "Operations")
        assert template["execution_environment"] == "sentinel-heal"
        # one memory for every job, outside the job's container: on PostgreSQL, the password from the credential; the
        # jobs that tell people, their destinations from another (a check job sends nothing)
        telling = ["sentinel.heal notifications"] if template is not check else []
        assert template["credentials"] == ["web ssh", "sentinel.heal memory", *telling]
        assert template["extra_vars"] == {"autoheal_memory_url": FULL["autoheal_awx_memory_url"]}
    assert heal["survey_enabled"] and check["survey_enabled"] and heal["survey_spec"] == check["survey_spec"]
    # approve alone takes -e plan_id=ID [-e deny=true -e note=WHY], as playbooks/approve.yml says
    assert approve["ask_variables_on_launch"] is True
    (environment,) = tasks_of(configured, "awx.awx.execution_environment")
    assert environment["image"] == FULL["autoheal_awx_execution_environment_image"]
    (project,) = tasks_of(configured, "awx.awx.project")
    assert (project["scm_url"], project["default_environment"]) == (FULL["autoheal_awx_project_url"], "sentinel-heal")


def test_survey_asks_what_the_role_reads(configured: dict[str, Any]) -> None:
    (workflow,) = tasks_of(configured, "awx.awx.workflow_job_template")
    survey = workflow["survey_spec"]
    assert workflow["survey_enabled"] and survey == tasks_of(configured, "awx.awx.job_template")[0]["survey_spec"]
    questions = {question["variable"]: question for question in survey["spec"]}
    assert set(questions) == {"autoheal_target", "autoheal_target_services", "autoheal_max_attempts"}
    # the services as text (the role splits it at the commas), optional: an EDA activation names the alerted one
    services = questions["autoheal_target_services"]
    assert (services["type"], services["required"], services["default"]) == ("text", False, "")
    # autoheal_target is heal.yml's hosts pattern; autoheal_max_attempts the role's option, with its default and range
    assert "autoheal_target" in yaml.safe_load((ROOT / "playbooks" / "heal.yml").read_text(encoding="utf-8"))[0]["hosts"]
    specs = yaml.safe_load((ROOT / "roles" / "autoheal" / "meta" / "argument_specs.yml").read_text(encoding="utf-8"))
    option = specs["argument_specs"]["main"]["options"]["autoheal_max_attempts"]
    attempts = questions["autoheal_max_attempts"]
    assert (attempts["type"], option["type"], attempts["default"]) == ("integer", "int", option["default"])
    assert (attempts["min"], attempts["max"]) == (1, 10) and "1-10" in option["description"]
    assert questions["autoheal_target"]["required"] and questions["autoheal_target"]["default"] == "all"


def test_workflow_heal_approval_approve(configured: dict[str, Any]) -> None:
    nodes = tasks_of(configured, "awx.awx.workflow_job_template_node")
    by_id = {node["identifier"]: node for node in nodes}
    (workflow,) = tasks_of(configured, "awx.awx.workflow_job_template")
    assert {node["workflow_job_template"] for node in nodes} == {workflow["name"]} == {"sentinel.heal heal with approval"}
    assert by_id["heal"]["unified_job_template"] == "sentinel.heal heal"
    assert by_id["approve"]["unified_job_template"] == "sentinel.heal approve"
    assert "unified_job_template" not in by_id["approval"] and by_id["approval"]["approval_node"]["timeout"] == 86400
    # heal -(always)-> approval -(on approval)-> approve
    assert by_id["heal"]["always_nodes"] == ["approval"] and by_id["approval"]["success_nodes"] == ["approve"]
    assert "success_nodes" not in by_id["approve"] and "always_nodes" not in by_id["approve"]
    # a node names only nodes created before it
    seen: set[str] = set()
    for node in nodes:
        assert set(node.get("success_nodes", []) + node.get("always_nodes", [])) <= seen
        seen.add(node["identifier"])
    job_templates = {args["name"] for args in tasks_of(configured, "awx.awx.job_template")}
    assert {node["unified_job_template"] for node in nodes if "unified_job_template" in node} <= job_templates
    # the approval node waits no longer than a stored plan lives (the role's autoheal_approval_ttl)
    defaults = yaml.safe_load((ROOT / "roles" / "autoheal" / "defaults" / "main.yml").read_text(encoding="utf-8"))
    assert by_id["approval"]["approval_node"]["timeout"] <= defaults["autoheal_approval_ttl"]


def test_the_heal_jobs_set_stats_feed_the_approve_job() -> None:
    """AWX hands a job's set_stats data (its artifacts) to the later jobs of a workflow as extra variables, through
    the approval node: the role exports autoheal_pending_plans, added up over the hosts, and approve.yml runs them."""
    tasks = yaml.safe_load((ROOT / "roles" / "autoheal" / "tasks" / "main.yml").read_text(encoding="utf-8"))
    (task,) = [task for task in tasks if "ansible.builtin.set_stats" in task]
    export = task["ansible.builtin.set_stats"]
    assert set(export["data"]) == {"autoheal_pending_plans"}
    # once per batch, the lists of the batch's hosts: set_stats adds up the batches of a play with serial
    assert task["run_once"] and "ansible_play_batch" in task["vars"][export["data"]["autoheal_pending_plans"].strip("{} ")]
    assert "pending_plans" in task["vars"][export["data"]["autoheal_pending_plans"].strip("{} ")]
    assert export.get("aggregate", True) and not export.get("per_host", False)
    approve = yaml.safe_load((ROOT / "playbooks" / "approve.yml").read_text(encoding="utf-8"))
    assert "autoheal_pending_plans | default([]) | map(attribute='plan_id')" in approve[0]["vars"]["autoheal_approve_ids"]
    from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.results import pending_plan

    plan = pending_plan("node1", {"plan_id": "p1", "service": "nginx", "reason": "r", "verdicts": [], "puts_back": []})
    assert {"plan_id", "host", "service", "steps", "reason", "puts_back"} <= set(plan)


def test_a_project_of_ones_own_imports_the_collections_playbooks(tmp_path: Path, awx_collections: Path) -> None:
    """The two project files the guide awx.rst gives, syntax-checked against the collection's own playbooks."""
    blocks = [code_block("awx", name).body for name in ("project_heal", "project_approve")]
    files = {block.splitlines()[0].removeprefix("# "): block for block in blocks}
    assert set(files) == {"playbooks/heal.yml", "playbooks/approve.yml"}
    for name, block in files.items():
        assert "import_playbook" in block, block
        path = tmp_path / name
        path.parent.mkdir(exist_ok=True)
        path.write_text(block, encoding="utf-8")
        (imported,) = [play["ansible.builtin.import_playbook"] for play in yaml.safe_load(path.read_text(encoding="utf-8"))]
        assert imported == f"sentinel.heal.{Path(name).stem}"
        subprocess.run([str(BIN / "ansible-playbook"), "--syntax-check", name], check=True, capture_output=True, text=True,
                       env=awx_env(awx_collections), cwd=tmp_path)


def test_the_memory_of_the_jobs(configured: dict[str, Any], awx_collections: Path) -> None:
    """Without a database, every job's memory is the state dir the execution node exposes; with one, the password
    reaches the jobs only through a credential that injects PGPASSWORD (a secret input, never a variable)."""
    minimal = analysis(PLAYBOOK, MINIMAL, awx_collections)
    assert [task["action"] for task in minimal["tasks"]].count("awx.awx.job_template") == 3
    for template in tasks_of(minimal, "awx.awx.job_template"):
        assert template["extra_vars"] == {"autoheal_state_dir": "/var/lib/sentinel-heal"} and template["credentials"] == []
        assert "execution_environment" not in template  # omitted: the controller's default
    kind = _named(tasks_of(configured, "awx.awx.credential_type"), "sentinel.heal memory")
    credential = _named(tasks_of(configured, "awx.awx.credential"), "sentinel.heal memory")
    assert kind["injectors"] == {"env": {"PGPASSWORD": "{{ password }}"}}
    assert kind["inputs"]["fields"][0]["id"] == "password" and kind["inputs"]["fields"][0]["secret"] is True
    assert (credential["name"], credential["credential_type"]) == ("sentinel.heal memory", kind["name"])
    assert credential["inputs"] == {"password": FULL["autoheal_awx_memory_password"]}
    plays = yaml.safe_load(PLAYBOOK.read_text(encoding="utf-8"))
    assert all(task["no_log"] is True for task in plays[0]["tasks"] if "awx.awx.credential" in task)
    defaults = yaml.safe_load((ROOT / "roles" / "autoheal" / "defaults" / "main.yml").read_text(encoding="utf-8"))
    assert {"autoheal_state_dir", "autoheal_memory_url"} <= set(defaults)


def _named(tasks: list[dict[str, Any]], name: str) -> dict[str, Any]:
    (task,) = [task for task in tasks if task["name"] == name]
    return task


def injected_extra_vars(kind: dict[str, Any], inputs: dict[str, Any]) -> dict[str, Any]:
    """What AWX gives a job of a credential of the type ``kind``: each extra_vars injector rendered with the credential's
    inputs by a sandboxed Jinja environment (a string), written to the job's extra vars file marked !unsafe (AWX's
    safe_dump), and loaded by Ansible from it."""
    rendered = {name: jinja2.sandbox.ImmutableSandboxedEnvironment().from_string(template).render(**inputs)
                for name, template in kind["injectors"]["extra_vars"].items()}
    extra_vars_file = "".join(f"{name}: !unsafe {json.dumps(value)}\n" for name, value in rendered.items())
    return dict(DataLoader().load(extra_vars_file))


def test_the_notification_destinations_reach_the_heal_and_approve_jobs_as_autoheal_notify(configured: dict[str, Any]) -> None:
    """autoheal_awx_notify is a secret input of a credential of its own type, whose injector gives the jobs it is
    attached to (heal and approve) autoheal_notify - as text, the way AWX injects every extra variable; the role and
    approve.yml read that text as the list it holds."""
    kind = _named(tasks_of(configured, "awx.awx.credential_type"), "sentinel.heal notifications")
    credential = _named(tasks_of(configured, "awx.awx.credential"), "sentinel.heal notifications")
    [field] = kind["inputs"]["fields"]
    assert (field["id"], field["secret"], field["multiline"], kind["inputs"]["required"]) == ("destinations", True, True, ["destinations"])
    assert kind["injectors"] == {"extra_vars": {"autoheal_notify": "{{ destinations }}"}}
    assert credential["credential_type"] == kind["name"] and set(credential["inputs"]) == {"destinations"}
    injected = injected_extra_vars(kind, credential["inputs"])
    assert isinstance(injected["autoheal_notify"], str)
    role_vars = yaml.safe_load((ROOT / "roles" / "autoheal" / "vars" / "main.yml").read_text(encoding="utf-8"))
    approve = yaml.safe_load((ROOT / "playbooks" / "approve.yml").read_text(encoding="utf-8"))
    readers = [role_vars["autoheal_notify_destinations"], *(play["vars"]["autoheal_notify_destinations"] for play in approve)]
    for reader in readers:
        for given in (injected, {"autoheal_notify": FULL["autoheal_awx_notify"]}):
            assert Templar(loader=DataLoader(), variables=given).template(trust_as_template(reader)) == FULL["autoheal_awx_notify"]
    assert Templar(loader=DataLoader(), variables={}).template(trust_as_template(readers[1])) == []
    # what reads it hands it to the tasks that tell
    tasks = yaml.safe_load((ROOT / "roles" / "autoheal" / "tasks" / "main.yml").read_text(encoding="utf-8"))
    telling = [task for play in approve for task in play["tasks"] if {"sentinel.heal.execute", "sentinel.heal.approval"} & set(task)]
    heal = [task for task in tasks if "sentinel.heal.heal" in task]
    assert [next(iter(task[action]["notify"] for action in task if action.startswith("sentinel.heal."))) for task in [*heal, *telling]] == [
        "{{ autoheal_notify_destinations }}"] * 3
    # without destinations no credential is made (and none attached: test_the_memory_of_the_jobs)
    plays = yaml.safe_load(PLAYBOOK.read_text(encoding="utf-8"))
    made = [task for task in plays[0]["tasks"] if "notification destinations" in task["name"]]
    assert len(made) == 2 and all(task["when"] == "autoheal_awx_notify | length > 0" for task in made)
