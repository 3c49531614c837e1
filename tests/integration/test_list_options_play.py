"""A wrong value in a list option, as a person meets it through ansible-playbook (no lab needed): the role, the heal
module and service_check each name the option a person wrote, the entry (its index and name), the field and the value."""

from __future__ import annotations

import re
from pathlib import Path

from conftest import one_line, run_on_localhost

SERVICES = [f"{{name: svc{index}, ports: [{8000 + index}]}}" for index in range(12)]
SERVICES.insert(7, "{name: web, ports: [eighty]}")
PLAYBOOK = """
- hosts: localhost
  gather_facts: false
  vars:
    services: [SERVICES]
  tasks:
    - name: the role
      block:
        - {name: the role, ansible.builtin.include_role: {name: sentinel.heal.autoheal}, vars: {autoheal_services: "{{ services }}"}}
      rescue:
        - {name: what the role said, ansible.builtin.debug: {msg: "role: {{ ansible_failed_result.msg }}"}}
    - name: the heal module
      sentinel.heal.heal: {services: "{{ services }}", state_dir: "{{ autoheal_state_dir }}"}
      register: healed
      ignore_errors: true
    - name: service_check
      sentinel.heal.service_check: {services: "{{ services }}"}
      register: checked
      ignore_errors: true
    - {name: what the modules said, ansible.builtin.debug: {msg: "heal: {{ healed.msg }} / service_check: {{ checked.msg }}"}}
""".replace("SERVICES", ", ".join(SERVICES))


def test_a_wrong_value_in_the_services_list_says_where_it_is_in_the_role_and_the_modules(tmp_path: Path) -> None:
    run = run_on_localhost(PLAYBOOK, tmp_path)
    output = one_line(run.output)
    said = re.search(r"msg: (?:'|\")?role: (?P<role>.*?)\s+TASK .*msg: (?:'|\")?heal: (?P<heal>.*) / service_check: (?P<check>.*?)\s+PLAY RECAP",
                     output)
    assert said, run.output
    assert said["role"].startswith("autoheal_services[7] (web): ports: [''eighty'']: "), said["role"]
    for module in ("heal", "check"):
        assert said[module].startswith("services[7] (web): ports: [''eighty'']: "), said[module]
    assert run.recap["localhost"]["failed"] == 0 and "ignored=2" in output
