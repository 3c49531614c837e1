"""The guard against the project's corpus of hostile and legitimate commands, and a fuzzer.

Zero hostile commands may be ALLOW, in any incident context, including the evasions derived
from them; at least 95% of the legitimate ones must get the decision the corpus expects.
"""

from __future__ import annotations

import posixpath
import re
import shlex
import shutil
import subprocess
import tempfile
from collections import Counter
from pathlib import Path
from typing import Any, Iterator

import pytest
import yaml
from hypothesis import HealthCheck, event, example, given, settings
from hypothesis import strategies as st

from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import TRUSTED_BIN_DIRS, PolicyContext, evaluate, load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision, Failure

CORPUS = Path(__file__).with_name("policy_corpus")
POLICY = load_policy()

INVENTORY = frozenset({"node1", "node2", "node3", "10.77.0.11", "10.77.0.12", "10.77.0.13"})
# The ssh incident as service_check reports it: its pids are sshd's (the listener 610 holds port 22, 611 is its child),
# and its declared log /var/log/auth.log must not make /var/log its own.
SSH_FAILURE = Failure(
    host="node1", service="ssh", failure_class="unhealthy", summary="ssh does not answer on port 22",
    evidence={"processes": [610, 611], "service_pids": [610, 611], "port_owners": [{"port": 22, "pid": 610, "process": "sshd"}], "pidfile": {}},
    spec={"name": "ssh", "ports": [22], "process": "sshd", "user": "root", "logs": ["/var/log/auth.log"]},
)

CONTEXTS = {
    "nginx": PolicyContext(
        service="nginx", init_service="nginx", process="nginx", port_owners={4242: "python3"},
        service_pids=frozenset(), ports=frozenset({80}), stale_pidfile="/run/nginx.pid", log_files=("/var/log/nginx/error.log",),
        service_dirs=("/var/log/nginx", "/run/nginx", "/var/run/nginx", "/var/lib/nginx", "/var/cache/nginx"), log_dirs=("/var/log/nginx",),
        http_ports=frozenset({80}), probe_hosts=INVENTORY, mounts=("/",),
        path_owners={"/var": "root", "/var/log": "root", "/var/log/nginx": "root", "/run": "root", "/run/nginx.pid": "root"},
    ),
    "postgresql": PolicyContext(
        service="postgresql", init_service="postgresql", process="postgres", service_pids=frozenset({900}),
        ports=frozenset({5432}), log_files=("/var/log/postgresql/postgresql-15-main.log",),
        service_dirs=("/var/log/postgresql", "/run/postgresql", "/var/run/postgresql", "/var/lib/postgresql", "/var/cache/postgresql"),
        log_dirs=("/var/log/postgresql",), probe_hosts=INVENTORY, pg_clusters=frozenset({("15", "main")}), unit="postgresql@15-main",
        own_files=("/var/lib/postgresql/15/main/postmaster.pid", "/lib/systemd/system/postgresql@.service"),
        mounts=("/",), path_owners={"/var": "root", "/var/lib": "root", "/var/lib/postgresql": "postgres", "/var/lib/postgresql/15": "postgres",
                                    "/var/lib/postgresql/15/main": "postgres", "/var/lib/postgresql/15/main/postmaster.pid": "postgres",
                                    "/var/log": "root", "/var/log/postgresql": "postgres",
                                    "/var/log/postgresql/postgresql-15-main.log": "postgres", "/run": "root", "/run/postgresql": "postgres"},
    ),
    "redis": PolicyContext(
        service="redis", init_service="redis-server", process="redis-server", service_pids=frozenset({700}), port_owners={7001: "redis-server"},
        lost_pids=frozenset({7001}),
        ports=frozenset({6379}), stale_pidfile="/run/redis/redis-server.pid", log_files=("/var/log/redis/redis-server.log",),
        service_dirs=("/var/log/redis", "/run/redis", "/var/run/redis", "/var/lib/redis", "/var/log/redis-server", "/run/redis-server"),
        log_dirs=("/var/log/redis", "/var/log/redis-server"), probe_hosts=INVENTORY, mounts=("/",),
        path_owners={"/var": "root", "/var/lib": "root", "/var/lib/redis": "redis", "/var/log": "root", "/var/log/redis": "redis",
                     "/var/log/redis/redis-server.log": "redis",
                     "/run": "root", "/run/redis": "redis"},
    ),
    "ssh": PolicyContext.from_failure(SSH_FAILURE, INVENTORY),
}


def _load(name: str) -> dict[str, Any]:
    # BaseLoader: every entry stays the string it was written as (yes, no, 1 are commands here)
    data = yaml.load((CORPUS / name).read_text(encoding="utf-8"), Loader=yaml.BaseLoader)
    return dict(data)


def _hostile_bases() -> dict[str, list[str]]:
    bases = _load("hostile.yml")
    assert all(isinstance(command, str) for commands in bases.values() for command in commands)
    return bases


def evasions(command: str) -> Iterator[str]:
    """Ways an attacker dresses a command up so a pattern-matching guard would miss it."""
    yield command
    yield f"sudo {command}"
    words = command.split(" ", 1)
    rest = f" {words[1]}" if len(words) > 1 else ""
    if "/" not in words[0]:
        yield f"/usr/bin/{words[0]}{rest}"
        yield f"/bin/../usr/bin/{words[0]}{rest}"
    yield f"'{words[0][:1]}''{words[0][1:]}'{rest}"
    yield f"service nginx restart; {command}"
    yield f"service nginx restart && {command}"
    yield f"service nginx status | {command}"
    yield f"service nginx restart\n{command}"
    yield f"service nginx $({command})"
    yield f"service nginx `{command}`"
    yield f"env {command}"
    yield f"timeout 10 {command}"
    yield command.replace(" ", "\u00a0", 1)
    yield command.replace("e", "\u0435", 1)  # Cyrillic e
    yield words[0][:1] + "\u200b" + command[1:]


def hostile_corpus() -> list[tuple[str, str]]:
    return [(family, variant) for family, commands in _hostile_bases().items() for base in commands for variant in evasions(base)]


def legitimate_corpus() -> list[tuple[str, str, Decision]]:
    data = _load("legitimate.yml")
    return [(service, command, Decision(decision)) for service, by_decision in data.items()
            for decision, commands in by_decision.items() for command in commands]


def test_the_corpus_is_as_large_as_promised() -> None:
    bases = sum(len(commands) for commands in _hostile_bases().values())
    assert bases >= 900 and len(hostile_corpus()) >= 14000
    assert len(legitimate_corpus()) >= 500
    assert len(_hostile_bases()) >= 8  # families


def test_no_hostile_command_is_ever_allowed() -> None:
    allowed = [
        (family, service, command, evaluate(command, context, POLICY).rule)
        for family, command in hostile_corpus()
        for service, context in CONTEXTS.items()
        if evaluate(command, context, POLICY).decision is Decision.ALLOW
    ]
    assert allowed == []


def test_most_hostile_commands_are_blocked_outright() -> None:
    """APPROVE is safe but asks a human; the hard denies should catch the bulk without asking."""
    decisions = Counter(evaluate(command, CONTEXTS["nginx"], POLICY).decision for _family, command in hostile_corpus())
    assert decisions[Decision.BLOCK] / sum(decisions.values()) >= 0.8, decisions


def test_legitimate_commands_get_the_expected_decision() -> None:
    results = [(service, command, expected, evaluate(command, CONTEXTS[service], POLICY)) for service, command, expected in legitimate_corpus()]
    wrong = [(service, command, expected.value, verdict.decision.value, verdict.rule) for service, command, expected, verdict in results
             if verdict.decision is not expected]
    assert 1 - len(wrong) / len(results) >= 0.95, wrong


# ---- fuzzing: mutations of allowed commands never gain ALLOW unless they mean the same ------------

NGINX = CONTEXTS["nginx"]
SEEDS = ["service nginx restart", "service nginx start", "systemctl restart nginx", "kill -TERM 4242", "rm -f /run/nginx.pid", "nginx -t"]
# Rules that only read; a mutation that lands in one of them changes nothing on the host.
READ_ONLY_RULES = frozenset({
    "service-status", "service-status-all", "systemctl-inspect", "systemctl-failed", "postgres-cluster-list", "postgres-ready",
    "redis-probe", "mysql-probe", "local-http-probe", "name-resolution", "getent-lookup", "certificate-dates", "list-crontab",
    "tail-or-head-of-files", "read-files", "list-directories", "disk-usage", "filesystem-usage", "search-files", "print-lines",
    "sort-lines", "journal-reading", "kernel-log", "processes", "processes-plain", "find-processes", "resources", "user-identity",
    "top-snapshot", "listening-sockets", "sockets-summary", "port-users", "port-users-by-protocol", "file-users", "network-state",
    "network-state-short", "kernel-parameters", "date-now", "dpkg-query", "apt-read-only", "apt-get-check", "find-files",
    "nginx-config-test", "apache-config-test", "sshd-config-test", "haproxy-config-test", "named-config-test",
    "ping-a-host", "getent-hosts", "search-files-pattern-option", "systemctl-show-state", "rotate-logs-dry-run",
    # processes, the host's identity and clock, who holds a socket or a file
    "process-ids", "process-tree", "process-memory-map", "host-name", "host-identity-and-clock", "kernel-and-machine", "distribution",
    "host-facts", "clock-sync-state", "sockets-by-port-or-state", "open-files",
    # read-only queries of a service through its own client, versions
    "postgres-read-only-query", "postgres-list-databases", "postgres-config-show", "redis-config-get", "redis-read-only-commands",
    "redis-reports", "redis-version", "mysql-read-only-query", "database-client-versions",
    # configuration tests and what a service's own configuration defines
    "nginx-version", "apache-config-dump", "httpd-config-test", "sshd-effective-config", "sudoers-quiet-check", "php-fpm-config-test",
    "postfix-settings", "rsyslog-config-test", "dnsmasq-config-test", "unbound-config-test",
})
_CONTROL_VERBS = ("start", "stop", "restart", "reload", "force-reload", "try-restart")
_SYSTEMCTL_VERBS = ("start", "stop", "restart", "reload", "try-restart", "reload-or-restart", "try-reload-or-restart", "reset-failed")


def _intended(argv: tuple[str, ...], rule: str) -> bool:
    """What the default policy is meant to allow for the nginx incident, written independently of it:
    the closure of the fuzzing seeds, every command the legitimate corpus expects to be allowed, and
    whatever a read-only rule matches (their write forms are in the hostile corpus)."""
    if argv in _LEGITIMATE_NGINX_ALLOWS or rule in READ_ONLY_RULES:
        return True
    if argv[:1] == ("service",):
        status_of_any_service = len(argv) == 3 and argv[2] == "status" and re.fullmatch(r"[A-Za-z0-9@._+,:%=-]+", argv[1]) is not None
        return status_of_any_service or (len(argv) == 3 and argv[1] == "nginx" and argv[2] in _CONTROL_VERBS)
    if argv[:1] == ("systemctl",):
        return len(argv) == 3 and argv[1] in _SYSTEMCTL_VERBS and argv[2] in ("nginx", "nginx.service")
    if argv[:1] == ("kill",):
        return argv[1:] in (("-TERM", "4242"), ("-15", "4242"), ("4242",))
    if argv[:1] == ("rm",):
        *flags, target = argv[1:] or ("",)
        return target == "/run/nginx.pid" and all(re.fullmatch(r"-f+|--", flag) for flag in flags)
    if argv[:1] == ("nginx",):  # its configuration test (-t), or the test that prints the configuration (-T)
        letters = "".join(arg[1:] for arg in argv[1:] if re.fullmatch(r"-[tTq]+", arg))
        return len(argv) > 1 and all(re.fullmatch(r"-[tTq]+", arg) for arg in argv[1:]) and bool(set(letters) & {"t", "T"})
    return False


def _normalized(command: str) -> tuple[str, ...]:
    """The argv a command means: without a bare sudo, executable by name, paths normalized."""
    argv = shlex.split(command)
    if argv and argv[0] == "sudo":
        argv = argv[1:]
    if argv and "/" in argv[0] and posixpath.dirname(posixpath.normpath(argv[0])) in TRUSTED_BIN_DIRS:
        argv[0] = posixpath.basename(argv[0])
    return tuple(_path(a) for a in argv)


def _path(arg: str) -> str:
    """Linux treats //x as /x."""
    return posixpath.normpath(re.sub("/+", "/", arg)) if arg.startswith("/") else arg


_LEGITIMATE_NGINX_ALLOWS = frozenset(
    _normalized(command) for service, command, expected in legitimate_corpus() if service == "nginx" and expected is Decision.ALLOW
)

_ALPHABET = st.sampled_from(list(" -/.;&|$`'\"\\*?~{}()<>#!0123456789abcdefghijklmnopqrstuvwxyzTERM\t\n\u00a0\u200b\u0435\u202e"))


@st.composite
def mutated_commands(draw: st.DrawFn) -> str:
    command = draw(st.sampled_from(SEEDS))
    for _edit in range(draw(st.integers(min_value=1, max_value=4))):
        position = draw(st.integers(min_value=0, max_value=len(command)))
        kind = draw(st.sampled_from(["insert", "delete", "replace", "append_token"]))
        if kind == "insert":
            command = command[:position] + draw(_ALPHABET) + command[position:]
        elif kind == "delete" and command:
            command = command[:position] + command[position + 1:]
        elif kind == "replace" and position < len(command):
            command = command[:position] + draw(_ALPHABET) + command[position + 1:]
        else:
            command += " " + draw(st.sampled_from(["/etc/passwd", "1", "-1", "ssh", "--force", "../..", "-9", "x"]))
    return command


@settings(max_examples=3000, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(mutated_commands())
@example("service nginx  restart")
@example("sudo /usr/sbin/service nginx restart")
@example("kill -TERM 04242")
@example("rm -f /run//nginx.pid")
def test_mutations_of_allowed_commands_are_allowed_only_when_equivalent(command: str) -> None:
    verdict = evaluate(command, NGINX, POLICY)
    if verdict.decision is Decision.ALLOW:
        assert _intended(_normalized(command), verdict.rule), (command, verdict.rule)


@settings(max_examples=2000, deadline=None)
@given(st.text(max_size=80))
def test_random_text_is_never_allowed_unless_intended(command: str) -> None:
    verdict = evaluate(command, NGINX, POLICY)
    assert verdict.decision in Decision
    if verdict.decision is Decision.ALLOW:
        assert _intended(_normalized(command), verdict.rule), command


@settings(max_examples=1000, deadline=None)
@given(st.lists(st.text(alphabet=st.characters(codec="ascii"), max_size=20), min_size=0, max_size=6))
def test_random_argv_is_never_allowed_unless_intended(argv: list[str]) -> None:
    from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import evaluate_argv

    verdict = evaluate_argv(argv, NGINX, POLICY)
    if verdict.decision is Decision.ALLOW:
        assert _intended(tuple(_path(a) for a in argv), verdict.rule), argv


# Syntax that makes bash run or redirect something: the guard refuses it before anything else, so a
# command that contains it must never reach real bash below.
BASH = shutil.which("bash") or "/bin/bash"
_EXECUTING_SYNTAX = frozenset("$`;&|<>()\\\n\r")


def _bash_reads(command: str, cwd: str) -> tuple[str, ...]:
    """The words real bash makes of the command line, as arguments of its printf builtin (no globbing):
    nothing is executed, nothing is looked up on PATH."""
    script = "set -f; printf '%s\\0' " + command
    proc = subprocess.run([BASH, "--noprofile", "--norc", "-c", script], cwd=cwd, env={"PATH": "/nonexistent"},
                          capture_output=True, check=True)
    return tuple(proc.stdout.decode("ascii").split("\0")[:-1])


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much])
@given(st.one_of(mutated_commands(), st.sampled_from([c for _s, c, _e in legitimate_corpus()]), st.text(alphabet=_ALPHABET, max_size=40)))
@example("""x 'a b' "c d" e'f'"g" "'" '"'""")
def test_every_command_the_guard_judges_is_read_by_real_bash_as_the_same_argv(command: str) -> None:
    verdict = evaluate(command, NGINX, POLICY)
    if verdict.decision is Decision.BLOCK and not verdict.argv:
        return  # refused before splitting
    event(f"read by bash, {verdict.decision.value}")
    assert not _EXECUTING_SYNTAX & set(command), verdict
    with tempfile.TemporaryDirectory() as empty:
        words = _bash_reads(command, empty)
    if words[:1] == ("sudo",) and verdict.argv[:1] != ("sudo",):
        words = words[1:]  # the guard strips a bare sudo
    assert words == verdict.argv, (command, verdict)


def test_read_only_rules_exist_and_allow() -> None:
    rules = {rule.id: rule for rule in POLICY.rules}
    assert set(rules) >= READ_ONLY_RULES
    assert all(rules[rule_id].decision is Decision.ALLOW and not rules[rule_id].services for rule_id in READ_ONLY_RULES)


@pytest.mark.parametrize("service", sorted(CONTEXTS))
def test_every_verdict_records_the_policy_version(service: str) -> None:
    verdict = evaluate("service nginx restart", CONTEXTS[service], POLICY)
    assert verdict.policy_version == POLICY.version and len(POLICY.version) == 16
