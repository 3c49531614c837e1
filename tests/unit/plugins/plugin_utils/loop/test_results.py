"""What a heal task's result says of where the policy was enforced on its host."""

from __future__ import annotations

from typing import Any

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.results import with_enforcement

HEALED: dict[str, Any] = {"status": "healed", "summary": ["node1: nginx healed"]}


@pytest.mark.parametrize(("privilege", "enforcement", "said", "enforced"), [
    ("executor", {"enforced": True, "other_rules": []},
     "node1: enforced on the host: the executor judged every step and read, and it is all the healing account may run as root", True),
    ("executor", {"enforced": False, "other_rules": ["(ALL) NOPASSWD: ALL"]},
     "node1: not enforced on the host: the executor judged every step and read, but the healing account keeps other sudo rules "
     "beside it ((ALL) NOPASSWD: ALL)", False),
    ("become", None, "node1: not enforced on the host: it has no executor (playbooks/host.yml installs it), so the guard on the "
     "controller alone judged every step", False),
])
def test_a_task_that_asked_for_the_executor_says_where_the_policy_was_enforced(
        privilege: str, enforcement: dict[str, Any] | None, said: str, enforced: bool) -> None:
    result = with_enforcement(HEALED, "node1", "auto", privilege, enforcement)
    assert result["summary"] == ["node1: nginx healed", said]
    assert result["enforcement"]["enforced"] is enforced and result["enforcement"]["executor"] is (privilege == "executor")


def test_a_task_that_chose_its_privilege_itself_or_a_host_that_did_not_answer_is_left_as_it_is() -> None:
    assert with_enforcement(HEALED, "node1", "become", "become", None) == HEALED
    unreachable = {"unreachable": True, "status": "unreachable", "msg": "the host did not answer"}
    assert with_enforcement(unreachable, "node1", "auto", "become", None) == unreachable
