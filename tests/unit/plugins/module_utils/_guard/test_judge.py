"""The argv judge (module_utils/_guard/judge.py) under the shipped policy: what its rules decide for a command in an
incident's context, step by step and for the plan as a whole. Commands are given as the controller's guard gives them
(``evaluate``), which splits them and hands the argv to the judge."""

from __future__ import annotations

import dataclasses
import shlex

import pytest
from test_policy_corpus import CONTEXTS, POLICY
from test_policy_red_team import as_plan, red_team
from test_policy_red_team_host import red_team_host

from ansible_collections.sentinel.heal.plugins.module_utils._guard.judge import judge_steps
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import PolicyContext, evaluate, evaluate_argv, evaluate_plan, load_policy
from ansible_collections.sentinel.heal.plugins.plugin_utils.incident import Decision


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
def test_known_remediations_are_allowed(command: str, rule: str, nginx_context: PolicyContext) -> None:
    verdict = evaluate(command, nginx_context)
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
def test_what_the_policy_does_not_know_needs_approval(command: str, nginx_context: PolicyContext) -> None:
    assert evaluate(command, nginx_context).decision is Decision.APPROVE


def test_plan_takes_the_strictest_decision(nginx_context: PolicyContext) -> None:
    verdicts, decision = evaluate_plan(["service nginx start", "apt-get update"], nginx_context)
    assert [v.decision for v in verdicts] == [Decision.ALLOW, Decision.APPROVE]
    assert decision is Decision.APPROVE
    _verdicts, decision = evaluate_plan(["service nginx start", "apt-get update", "reboot"], nginx_context)
    assert decision is Decision.BLOCK


def test_verdict_carries_the_split_argv_without_sudo(nginx_context: PolicyContext) -> None:
    verdict = evaluate("sudo service nginx start", nginx_context)
    assert verdict.argv == ("service", "nginx", "start")
    assert verdict.become is True


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


def test_a_short_option_cluster_takes_its_value_from_the_next_argument_as_getopt_does(nginx_context: PolicyContext) -> None:
    assert evaluate("tail -qn 5 /var/log/nginx/error.log", nginx_context).rule == "tail-or-head-of-files"
    assert evaluate("grep -ie x /etc/hostname", nginx_context).rule == "search-files-pattern-option"   # -e takes x: /etc/hostname is the file
    assert evaluate("grep -ie /etc/hostname x", nginx_context).decision is Decision.APPROVE               # x is a (relative) file


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


# ---- the judge alone, as the host's executor runs it, against the red teams' corpora (plugin_utils/guard/policy_corpus) ----

def test_no_red_team_probe_of_either_corpus_is_allowed_by_the_judge_the_host_executor_runs() -> None:
    """A compromised controller sends argv straight to the executor on the host: no command string, no bash grammar
    to cross-check it. The judge alone, as the executor runs it (module_utils, no second reading), ALLOWs none of the
    probes of either red team in any incident."""
    allowed = []
    for corpus in (red_team(), red_team_host()):
        for plan in (as_plan(probe) for probes in corpus.values() for probe in probes):
            try:
                steps = [shlex.split(step) for step in plan]
            except ValueError:
                continue  # no argv to send: the controller's split of it fails, and so would any sender's
            for service, context in CONTEXTS.items():
                _verdicts, decision = judge_steps(steps, context, POLICY)
                if decision is Decision.ALLOW:
                    allowed.append((service, plan))
    assert allowed == []
