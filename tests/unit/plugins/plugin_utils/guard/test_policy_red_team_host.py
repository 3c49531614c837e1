"""The guard against a second red team: what a command does to the host beyond the incident.

The corpus (policy_corpus/red_team_host.yml) holds the probes of eleven classes, written from their mechanisms:
symlinks the service's account plants where a trailing slash or a parent directory makes the kernel follow
them, other instances of a unit template, signals by process name, keys that pass for certificates, other
services' files, memory and data images, other units' environments, the whole journal, reads that never
end, and reads through links a service's account planted in its own directories. Every probe is judged as a plan
in every incident context, and none may be ALLOW. Its counterpart
(policy_corpus/benign_host.yml) holds what an SRE runs in an incident: every one of them is ALLOW.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import pytest
import yaml
from test_policy_corpus import CONTEXTS, POLICY
from test_policy_red_team import allowed_anywhere, as_plan

from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import PolicyContext, evaluate_plan
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision, Failure

RED_TEAM_HOST = Path(__file__).with_name("policy_corpus") / "red_team_host.yml"
BENIGN_HOST = Path(__file__).with_name("policy_corpus") / "benign_host.yml"
CLASSES = ("trailing_suffixes", "service_owned_parents", "template_instances", "pkill_by_name", "not_secret_names",
           "other_services_files", "memory_disk_data_images", "unit_environment", "journal_hunting", "endless_reads", "planted_links")
# Verdicts given before any rule is read (with no argv: refused before splitting): a probe refused for its spelling
# tests the lexer, not its class.
SPELLING_RULES = frozenset({"input", "length", "charset", "bash-grammar"})


def red_team_host() -> dict[str, list[Any]]:
    return dict(yaml.load(RED_TEAM_HOST.read_text(encoding="utf-8"), Loader=yaml.BaseLoader))


def test_the_host_red_team_corpus_has_every_class_with_at_least_30_distinct_probes() -> None:
    corpus = red_team_host()
    assert tuple(corpus) == CLASSES
    for name, probes in corpus.items():
        assert all(isinstance(p, str) or (isinstance(p, list) and 1 <= len(p) <= 3 and all(isinstance(s, str) for s in p))
                   for p in probes), name
        plain = [p if isinstance(p, str) else tuple(p) for p in probes]
        assert len(plain) >= 30 and len(set(plain)) == len(plain), name


@pytest.mark.parametrize("attack_class", CLASSES)
def test_every_host_probe_reaches_the_rules(attack_class: str) -> None:
    """A probe the guard refuses for its characters or quoting would pass the test below whatever the rules say."""
    refused = []
    for probe in red_team_host()[attack_class]:
        verdicts, _decision = evaluate_plan(as_plan(probe), CONTEXTS["nginx"], POLICY)
        refused += [(probe, v.rule) for v in verdicts if not v.argv or v.rule in SPELLING_RULES]
    assert refused == []


@pytest.mark.parametrize("attack_class", CLASSES)
def test_no_host_red_team_probe_is_allowed_in_any_incident(attack_class: str) -> None:
    assert allowed_anywhere(red_team_host()[attack_class]) == []


def benign_host() -> list[tuple[str, str]]:
    corpus = yaml.load(BENIGN_HOST.read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    return [(service, command) for service, lists in corpus.items() for command in lists["allow"]]


@pytest.mark.parametrize(("service", "command"), benign_host())
def test_what_an_sre_runs_in_the_incident_is_allowed(service: str, command: str) -> None:
    [verdict], decision = evaluate_plan([command], CONTEXTS[service], POLICY)
    assert decision is Decision.ALLOW, (verdict.rule, verdict.reason)


# ---- the mechanisms, through the context service_check's evidence gives ----------------------------------------------

def _postgres_failure(**evidence: Any) -> Failure:
    spec = {"name": "postgresql", "ports": [5432], "process": "postgres", "user": "postgres", "paths": ["/var/lib/postgresql/15/main"],
            "logs": ["/var/log/postgresql/postgresql-15-main.log"], "pidfile": "/var/lib/postgresql/15/main/postmaster.pid"}
    return Failure(host="node2", service="postgresql", failure_class="not_running", summary="", spec=spec,
                   evidence={"processes": [], "port_owners": [], "unit": {"Id": "postgresql@15-main.service",
                                                                          "FragmentPath": "/lib/systemd/system/postgresql@.service"},
                             **evidence},
                   facts={"service_manager": "systemd"})


@pytest.mark.parametrize(("command", "evidence", "expected"), [
    # the files the service's packages put in /etc, as dpkg's lists on the host name them, are its own
    ("cat /etc/postgresql-common/createcluster.conf", {"packages": {"names": ["postgresql-common"],
                                                                    "etc": ["/etc/postgresql-common/createcluster.conf"]}}, "allow"),
    ("cat /etc/postgresql-common/createcluster.conf", {}, "approve"),
    ("systemctl cat postgresql@15-main", {}, "allow"),                      # the unit service_check found running the cluster
    ("systemctl cat postgresql@14-main", {}, "approve"),                    # another cluster's
    ("cat /lib/systemd/system/postgresql@.service", {}, "allow"),           # its unit file
    # the declared log, which service_check saw as a file in a directory postgres does not own
    ("tail -n 50 /var/log/postgresql/postgresql-15-main.log", {"path_owners": {"/var/log/postgresql": "root"}}, "allow"),
    # a file in a directory postgres owns that service_check did not see: a link postgres planted would be followed
    ("tail -n 50 /run/postgresql/notes", {"path_owners": {"/run/postgresql": "postgres"}}, "approve"),
    ("chown postgres:postgres /run/postgresql", {"path_owners": {"/run/postgresql": "root"}, "mounts": ["/"]}, "allow"),
    ("chown -R postgres:postgres /var/lib/postgresql", {"mounts": ["/"]}, "allow"),
    ("chown -R postgres:postgres /var/lib/postgresql", {"mounts": ["/", "/var/lib/postgresql/15/main/pg_wal"]}, "approve"),
    ("chown -R postgres:postgres /var/lib/postgresql", {}, "approve"),      # the host did not say what is mounted
])
def test_the_guard_binds_to_what_service_check_saw_on_the_host(command: str, evidence: dict[str, Any], expected: str) -> None:
    context = PolicyContext.from_failure(_postgres_failure(**evidence))
    [verdict], _decision = evaluate_plan([command], context, POLICY)
    assert verdict.decision.value == expected, (verdict.rule, verdict.reason)
