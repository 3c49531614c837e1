"""sentinel.heal.heal used as a module (no lab needed): a service it was asked to heal and that stays down fails the
task (failed, rc != 0, the summary as its msg), as the role fails the host after its summary and export; an LLM that
failed is in that msg."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import one_line, run_on_localhost
from llm_server import Answer, ScriptedLLM

# a service nothing can bring back on this machine: its check always fails, and no unit or init script has its name
GHOST = '[{name: sentinel-ghost, status_check: false, check_command: "false"}]'
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: the heal module
      sentinel.heal.heal: {services: GHOST, state_dir: "{{ autoheal_state_dir }}", max_attempts: 1, interactive_approval: false}
      register: healed
      ignore_errors: true
    - {name: what the module said, ansible.builtin.debug: {msg: "module: failed={{ healed.failed }} status={{ healed.status }}"}}
    - name: the role
      block:
        - name: the role
          ansible.builtin.include_role: {name: sentinel.heal.autoheal}
          vars: {autoheal_services: GHOST, autoheal_max_attempts: 1, autoheal_interactive_approval: false}
      rescue:
        - {name: what the role said, ansible.builtin.debug: {msg: "role: {{ ansible_failed_task.name }}"}}
""".replace("GHOST", GHOST)


def test_a_service_left_down_fails_the_heal_task_and_the_role_fails_the_host_in_its_summary(tmp_path: Path) -> None:
    run = run_on_localhost(PLAYBOOK, tmp_path)
    output = one_line(run.output)
    assert "module: failed=True status=escalated" in output, run.output
    assert re.search(r"fatal: \[localhost\]: FAILED! => .*msg: .?localhost: sentinel-ghost escalated", output), run.output
    # the role's heal task does not fail on its own: the summary does, after the export of waiting plans
    assert "role: Summarize the host, and fail it when a service stays broken" in output, run.output


LLM_KEY = "sk-play-test-key-0123456789abcdef"
WITH_LLM = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: the heal module with an LLM that refuses its key
      sentinel.heal.heal:
        services: GHOST
        state_dir: "{{ autoheal_state_dir }}"
        max_attempts: 1
        interactive_approval: false
        builtin_runbooks: false
        knowledge: false
        llm: {model: scripted-model, base_url: "BASE_URL", api_key: "LLM_KEY", max_retries: 0}
""".replace("GHOST", GHOST).replace("LLM_KEY", LLM_KEY)


def test_an_llm_that_refuses_its_key_is_in_the_escalation_naming_the_key_option_never_the_key(tmp_path: Path) -> None:
    with ScriptedLLM(default=Answer.error(401, message=f"Incorrect API key provided: {LLM_KEY}")) as llm:
        run = run_on_localhost(WITH_LLM.replace("BASE_URL", llm.base_url), tmp_path)
        asked = len(llm.chat_requests)
    output = one_line(run.output)
    assert run.rc != 0 and asked == 1, run.output
    assert re.search(r"fatal: \[localhost\]: FAILED! => .*msg: .?localhost: sentinel-ghost escalated: ", output), run.output
    assert (f"the LLM (model scripted-model at {llm.base_url}) failed: the LLM refused the API key (HTTP 401: Incorrect API key "
            "provided: ********); field: llm.api_key; value: 'set, not shown'; fix: set llm.api_key") in output, run.output
    assert "the offline planner stood in" in output and LLM_KEY not in run.output


# a service that is fine wherever the test runs: its check always passes
FINE = '[{name: sentinel-fine, status_check: false, check_command: "true"}]'
HEALTHY_PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: the heal module
      sentinel.heal.heal: {services: FINE, state_dir: "{{ autoheal_state_dir }}", interactive_approval: false}
      register: healed
      ignore_errors: true
    - {name: what the module said, ansible.builtin.debug: {msg: "module: failed={{ healed.failed }} said={{ healed.msg }}"}}
    - name: the role
      ansible.builtin.include_role: {name: sentinel.heal.autoheal}
      vars: {autoheal_services: FINE, autoheal_interactive_approval: false}
""".replace("FINE", FINE)


def test_a_state_dir_that_is_a_file_fails_the_first_healthy_run_naming_the_path(tmp_path: Path) -> None:
    state = tmp_path / "state"  # the autoheal_state_dir run_on_localhost gives the play
    state.write_text("a file where the state dir should be\n")
    run = run_on_localhost(HEALTHY_PLAY, tmp_path)
    output = one_line(run.output)
    said = f"the state dir is a regular file, not a directory; field: state_dir; value: '{state}'; fix: point autoheal_state_dir"
    # the module's task, then the role's heal task, each once
    assert run.rc != 0 and run.output.count(f"Task failed: {said}") == 2, run.output
    assert "module: failed=True said=the state dir is a regular file" in output, run.output
    assert re.search(r"TASK \[sentinel.heal.autoheal : Check the declared services and heal the failed ones\] \*+ \[ERROR\]: Task "
                     r"failed: the state dir is a regular file", output), run.output
    assert "integrity_check" not in output and state.read_text() == "a file where the state dir should be\n"


# what a host whose python3 is a pyenv shim without that version answers to any module
BROKEN_INTERPRETER = """#!/bin/sh
echo "pyenv: python3.13: command not found" >&2
exit 127
"""


UNRUNNABLE_PLAY = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: the heal module
      sentinel.heal.heal: {services: FINE, state_dir: "{{ autoheal_state_dir }}", interactive_approval: false}
      ignore_errors: true
    - name: the role
      ansible.builtin.include_role: {name: sentinel.heal.autoheal}
      vars: {autoheal_services: FINE}
"""


def test_an_interpreter_that_cannot_run_the_check_is_reported_with_what_it_said_and_the_option_to_fix(tmp_path: Path) -> None:
    interpreter = tmp_path / "python3"
    interpreter.write_text(BROKEN_INTERPRETER)
    interpreter.chmod(0o755)
    run = run_on_localhost(UNRUNNABLE_PLAY.replace("FINE", FINE), tmp_path, "-e", f"ansible_python_interpreter={interpreter}")
    output = one_line(run.output)
    assert run.rc != 0, run.output
    told = (f"sentinel.heal.service_check could not run on the host: Module result deserialization failed: No start of json char "
            f"found; the host said: 'pyenv: python3.13: command not found' (rc 127); field: ansible_python_interpreter; value: "
            f"'{interpreter}'; fix: point ansible_python_interpreter at a Python 3 that runs on the host")
    # the heal module and the role alike
    assert output.count(told) >= 2, run.output
