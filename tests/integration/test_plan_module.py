"""sentinel.heal.plan through ansible-playbook against the scripted LLM server (no lab needed): the failure is given as
service_check reports it, so no host is checked and nothing runs; the answers are two that real servers give."""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from conftest import ROOT, run_playbook
from llm_server import Answer, ScriptedLLM

sys.path.insert(0, str(ROOT / "tests" / "unit" / "plugins" / "plugin_utils" / "brain"))

from test_llm import DRAFT, FACTS, FIX, LATIN_1_COMPLETION  # the answers of the client's own tests

from helpers import nginx_failure

PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  tasks:
    - name: plan
      sentinel.heal.plan:
        services: [{name: nginx}]
        failures: "{{ failures }}"
        facts: "{{ facts }}"
        builtin_runbooks: false
        state_dir: "{{ d }}/state"
        llm: {model: scripted-model, base_url: "{{ base_url }}", api_key: sk-plan-module-test, max_retries: 1, timeout: 10}
      register: proposal
    - name: keep what it said
      ansible.builtin.copy: {dest: "{{ d }}/said.json", content: "{{ proposal | to_json }}", mode: "0600"}
"""


def _plan_through_the_module(answer: Answer, tmp_path: Path) -> tuple[int, str, dict[str, Any]]:
    """The module's one plan for nginx, planned with the answer; the job's exit status and output beside it."""
    failure = nginx_failure().to_dict()
    failure["spec"] = {**failure["spec"], "ports": [], "logs": []}  # no evidence to read on this machine
    with ScriptedLLM(default=answer) as llm:
        (tmp_path / "vars.json").write_text(json.dumps({"failures": [failure], "facts": FACTS, "base_url": llm.base_url, "d": str(tmp_path)}))
        (tmp_path / "plan.yml").write_text(PLAYBOOK)
        run = run_playbook(str(tmp_path / "plan.yml"), "-e", f"@{tmp_path / 'vars.json'}", state_dir=tmp_path / "state")
    said = json.loads((tmp_path / "said.json").read_text()) if run.rc == 0 else {}
    [plan] = said.get("plans") or [{}]
    return run.rc, run.output, plan


def test_content_sent_as_parts_is_planned_from_its_text_parts(tmp_path: Path) -> None:
    text = json.dumps({"steps": [{"argv": argv} for argv in FIX], "diagnosis": "nginx was killed"})
    rc, output, plan = _plan_through_the_module(
        Answer.parts({"type": "thinking", "thinking": [{"type": "text", "text": DRAFT}]}, {"type": "text", "text": text}), tmp_path)
    assert rc == 0, output
    assert (plan["plan"]["source"], plan["plan"]["reference"]) == ("llm", "scripted-model")
    assert [step["argv"] for step in plan["plan"]["steps"]] == FIX


def test_a_body_that_is_not_utf8_falls_back_with_its_reason_and_the_job_succeeds(tmp_path: Path) -> None:
    rc, output, plan = _plan_through_the_module(Answer.body(LATIN_1_COMPLETION), tmp_path)
    assert rc == 0, output
    assert plan["plan"]["source"] == "generic" and [step["argv"] for step in plan["plan"]["steps"]] == [["service", "nginx", "restart"]]
    assert "failed: the LLM answered HTTP 200 with a body that is not UTF-8 (byte 0xe9 at offset " in plan["plan"]["rationale"]
    assert "ne d\\xe9marre pas" in plan["plan"]["rationale"]  # quoted escaped, as Python writes bytes
    assert "codec" not in output and "Traceback" not in output
