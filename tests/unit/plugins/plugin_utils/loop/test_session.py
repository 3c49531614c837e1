"""What the play's own process does for the workers Ansible forks from it: the shipped policy and runbooks parsed once
there, when it loads the heal action, so that no worker parses them again."""

from __future__ import annotations

import importlib
import json
import os

from ansible_collections.sentinel.heal.plugins.action import heal as heal_action
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary, _parse_runbook_file
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import _load_policy_cached, load_policy


def test_the_shipped_files_parsed_where_the_action_loads_are_not_parsed_again_in_a_forked_worker() -> None:
    _load_policy_cached.cache_clear()
    _parse_runbook_file.cache_clear()
    importlib.reload(heal_action)  # as Ansible loads the action's class in the play's process, before it forks
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
