"""The policy language (module_utils/_guard/policy_language.py): what a policy file may say, the field and value an
error names, and a user's policy over the shipped default."""

from __future__ import annotations

from pathlib import Path
from typing import Callable

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import PolicyFileError
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import PolicyContext, evaluate, load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision


@pytest.mark.parametrize(
    ("text", "field", "value"),
    [
        ("version: 2\n", "version", 2),
        ("version: 1\nrules:\n  - {id: a, executable: ls, argv: [], decision: maybe}\n", "rules[0].decision", "maybe"),
        ("version: 1\nrules:\n  - {id: a, executable: /bin/ls, argv: [], decision: allow}\n", "rules[0].executable", "/bin/ls"),
        ("version: 1\nrules:\n  - {id: a, executable: ls, argv: ['{nope}'], decision: allow}\n", "rules[0].argv[0]", "{nope}"),
        ("version: 1\nrules:\n  - {id: a, executable: ls, argv: [], decision: allow, colour: red}\n", "rules[0].colour", "red"),
        ("version: 1\nrules:\n  - {id: a, executable: ls, argv: [], decision: allow}\n  - {id: a, executable: ps, argv: [], decision: allow}\n",
         "rules[1].id", "a"),
        ("version: 1\nmax_command_length: 3\n", "max_command_length", 3),
        ("version: 1\nrules:\n  - {id: a, executable: chown, operands: ['{word}'], restores: [ownership], decision: allow}\n",
         "rules[0].restores", ["ownership"]),
        ("version: 1\nrules:\n  - {id: a, executable: kill, argv: [], effect: halts, decision: allow}\n", "rules[0].effect", "halts"),
        ("version: 1\npath_symlinks: {/var/run: run}\n", "path_symlinks", {"/var/run": "run"}),
        ("version: 1\nrules:\n  - {id: a, executable: ls, argv: [], decision: approve, approve_from_chat: 'no'}\n",
         "rules[0].approve_from_chat", "no"),
        # an allowed step waits for nobody, a blocked one never runs: only a person's step is approved somewhere
        ("version: 1\nrules:\n  - {id: a, executable: ls, argv: [], decision: allow, approve_from_chat: false}\n",
         "rules[0].approve_from_chat", False),
        ("version: 1\npackage_paths:\n  - {services: [x], path: /var/lib/x, owner: x, group: x, mode: rwx}\n",
         "package_paths[0].mode", "rwx"),
    ],
)
def test_invalid_policy_files_name_the_field_and_value(tmp_path: Path, text: str, field: str, value: object,
                                                       write_policy: Callable[[str], Path]) -> None:
    with pytest.raises(PolicyFileError) as caught:
        load_policy(write_policy(text))
    assert (caught.value.field, caught.value.value) == (field, value)
    assert str(tmp_path) in str(caught.value)


def test_a_user_policy_including_the_default_tightens_and_extends_it(write_policy: Callable[[str], Path]) -> None:
    policy = load_policy(write_policy(
        "version: 1\n"
        "include_default: true\n"
        "rules:\n"
        "  - {id: no-redis-restarts, executable: service, services: [redis], argv: ['{init_service}', restart], decision: block}\n"
        "  - {id: redis-lastsave, executable: redis-cli, argv: [lastsave], decision: allow}\n"
    ))
    redis = PolicyContext(service="redis", init_service="redis-server")
    nginx = PolicyContext(service="nginx", init_service="nginx")
    assert evaluate("service redis-server restart", redis, policy).rule == "no-redis-restarts"
    assert evaluate("service redis-server restart", redis, policy).decision is Decision.BLOCK
    assert evaluate("service redis-server start", redis, policy).decision is Decision.ALLOW  # the default rule still applies
    assert evaluate("service nginx restart", nginx, policy).decision is Decision.ALLOW       # the tightening is per service
    assert evaluate("redis-cli lastsave", redis, policy).decision is Decision.ALLOW
    assert evaluate("redis-cli flushall", redis, policy).decision is Decision.BLOCK            # default hard deny kept
    assert policy.version not in (load_policy().version, "")


def test_a_user_policy_can_replace_the_default(write_policy: Callable[[str], Path]) -> None:
    policy = load_policy(write_policy(
        "version: 1\n"
        "rules:\n"
        "  - {id: redis-ping, executable: redis-cli, argv: [ping], decision: allow}\n"
        "  - {id: no-restarts, executable: service, argv: ['{init_service}', restart], decision: block}\n"
    ))
    redis = PolicyContext(init_service="redis-server")
    assert evaluate("redis-cli ping", redis, policy).decision is Decision.ALLOW
    assert evaluate("redis-cli flushall", redis, policy).decision is Decision.APPROVE
    assert evaluate("service redis-server restart", redis, policy).decision is Decision.BLOCK
    assert evaluate("service redis-server restart", redis, policy).rule == "no-restarts"


def test_a_rule_may_keep_its_steps_out_of_chat_and_the_shipped_package_downgrade_does(write_policy: Callable[[str], Path]) -> None:
    policy = load_policy(write_policy(
        "version: 1\n"
        "include_default: true\n"
        "rules:\n"
        "  - {id: db-restart, executable: service, argv: ['{init_service}', restart], decision: approve, approve_from_chat: false}\n"
        "  - {id: web-restart, executable: service, argv: ['{init_service}', reload], decision: approve}\n"
    ))
    assert not policy.approvable_from_chat("db-restart") and policy.approvable_from_chat("web-restart")
    # an id no rule has (default-approve, a plan-level verdict) is a person's decision like any other
    assert policy.approvable_from_chat("default-approve")
    assert not load_policy(None).approvable_from_chat("downgrade-to-the-cached-version")
    assert load_policy(None).approvable_from_chat("restore-last-known-good-with-a-person")
