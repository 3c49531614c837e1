"""The executor on node1 (a systemd host of the group executor) against an attacker holding the healing account.

Each test plays one class of issue #50 as the attacker plays it: the healing account ``sentinel`` sending the
executor whatever it likes (``sudo -n /usr/libexec/sentinel-heal/exec`` from its own shell) and, where the class needs
it, a service account (``runuser -u redis``) preparing the host: a link for a log, a second redis of its own, a pid
reused. What the attacker sets up beyond a service account's reach is set up as root through the lab. Every request is
refused on the host, leaves one bounded entry in its journal (identifier sentinel-heal-exec) and changes nothing: the
state the class could reach is read on the host before and after. Each test puts back what it changed on the host.
"""

from __future__ import annotations

import json
import time
import uuid
from typing import Any

import pytest
from conftest import sh
from test_host_executor_lab import EXEC, NODE, as_healing_account, ask, failing_now

from ansible_collections.sentinel.heal.plugins.module_utils._host.decision_log import LOG_RATE, LOG_RATE_WINDOW_S, MAX_LOG_ENTRY_BYTES
from ansible_collections.sentinel.heal.plugins.module_utils._host.executor import REFUSED
from ansible_collections.sentinel.heal.plugins.module_utils._host.requests import MAX_REQUEST_BYTES
from ansible_collections.sentinel.heal.plugins.plugin_utils.guard.policy import load_policy

pytestmark = pytest.mark.lab
# what the classes below could change or read: each test compares it before and after
WATCHED_FILES = ("/etc/shadow", "/etc/passwd", "/etc/group", "/etc/redis/redis.conf", "/etc/nginx/nginx.conf",
                 "/etc/postgresql/15/main/postgresql.conf")
WATCHED_UNITS = ("nginx", "redis-server", "postgresql@15-main", "ssh", "cron", "dbus")
MARKER = "/etc/sentinel-heal/maintenance"
# the healing account's count of decision-log entries this minute (_host/decision_log.py's record_decision)
RATE_FILE = "/var/lib/sentinel-heal/decisions/sentinel"


def snapshot(lab: Any, *moving: str) -> str:
    """What an attacker of these classes could change: the watched files' content, owner, mode and links, /etc's owner,
    and each watched unit's state and main pid (but those ``moving`` of themselves: a unit systemd restarts)."""
    watched = " ".join(WATCHED_FILES)
    files = sh(lab, NODE, "sh", "-c", f"sha256sum {watched}; stat -c '%n %U:%G %a %h %F' /etc {watched}")
    units = sh(lab, NODE, "systemctl", "show", "-p", "Id,ActiveState,MainPID", *(f"{unit}.service" for unit in WATCHED_UNITS if unit not in moving))
    return files + units


def log_lines(lab: Any) -> list[str]:
    return [line for line in sh(lab, NODE, "journalctl", "-t", "sentinel-heal-exec", "-o", "cat", "--no-pager").splitlines()
            if line.startswith("{")]


def requests_entries(lab: Any) -> list[str]:
    """The journal's entries of requests (not the counts of those suppressed)."""
    return [line for line in log_lines(lab) if '"decision": "suppressed"' not in line]


def room_in_the_minute(lab: Any, needed: int = 4) -> None:
    """Wait until the healing account's minute of decision-log entries has room for ``needed`` more (the executor's
    rate file on the host: [minute's start, entries, suppressed]): this file sends more than LOG_RATE a minute."""
    kept = sh(lab, NODE, "sh", "-c", f"cat {RATE_FILE} 2>/dev/null || echo '[0, 0, 0]'")
    start, count, _suppressed = json.loads(kept)
    if count + needed > LOG_RATE and time.time() - start < LOG_RATE_WINDOW_S:
        time.sleep(start + LOG_RATE_WINDOW_S + 1 - time.time())


def refused_once(lab: Any, request: dict[str, Any], *, rule: str | None = None) -> dict[str, Any]:
    """The request sent as the healing account: refused, logged in exactly one entry of at most MAX_LOG_ENTRY_BYTES."""
    room_in_the_minute(lab)
    before = len(requests_entries(lab))
    rc, response = ask(lab, request)
    assert (rc, response["refused"]) == (REFUSED, True), (request, response)
    if rule:
        assert response["rule"] == rule, response
    new: list[str] = []
    for _wait in range(10):  # the journal's own write comes a moment later
        time.sleep(0.3)
        new = requests_entries(lab)[before:]
        if new:
            break
    time.sleep(0.3)
    new = requests_entries(lab)[before:]
    assert len(new) == 1, new
    assert len(new[0].encode()) <= MAX_LOG_ENTRY_BYTES and json.loads(new[0])["decision"] == "refused", new
    return response


def step(lab: Any, service: str, *plan: list[str], index: int = 0, run: str | None = None, **fields: Any) -> dict[str, Any]:
    """A step request for the failure the service has now (as the executor's check finds it)."""
    version = load_policy().version
    return {"host": NODE, "service": service, "policy_version": version, "plan": list(plan), "step": index,
            "run": run or f"attack-{uuid.uuid4().hex}", **failing_now(lab, service, NODE, version), **fields}


def check(service: str, **fields: Any) -> dict[str, Any]:
    return {"host": NODE, "kind": "check", "services": [service], "policy_version": load_policy().version, **fields}


def no_secret_in(response: dict[str, Any], lab: Any) -> None:
    shadow = [line for line in sh(lab, NODE, "cat", "/etc/shadow").splitlines() if line.count(":") == 8]
    said = json.dumps(response)
    assert shadow and not [line for line in shadow if line in said], said[:3000]


def test_1_a_plan_cut_into_pieces_replayed_out_of_order_or_twice_runs_nothing_beyond_the_whole_plan(lab: Any, faults: Any) -> None:
    faults.inject(NODE, "nginx-killed")
    plan = [["systemctl", "stop", "nginx"], ["systemctl", "start", "nginx"]]
    before = snapshot(lab)
    refused_once(lab, step(lab, "nginx", *plan, index=1, run="cut-1"), rule="plan-order")  # step 1 before step 0
    refused_once(lab, step(lab, "nginx", plan[0]), rule="plan-leaves-service-stopped")  # the stop as a plan of its own
    assert snapshot(lab) == before
    # step 0 alone, the attacker stopping there: the host runs the piece its plan allows, the start with it
    rc, ran = ask(lab, step(lab, "nginx", *plan, index=0, run="cut-0"))
    assert rc == 0 and ran["ran_with_it"] == [{"step": 1, "argv": plan[1], "rc": 0, "refused": False}], ran
    assert sh(lab, NODE, "systemctl", "is-active", "nginx").strip() == "active"
    healed = snapshot(lab)
    for index in (0, 1, 0):  # the same steps again: answered from what ran, nothing runs twice
        rc, again = ask(lab, step(lab, "nginx", *plan, index=index, run="cut-0"))
        assert rc == 0 and again["ran_before"] is True, again
    assert snapshot(lab) == healed


def test_2_a_healthy_service_is_neither_restarted_restored_nor_repaired_and_the_caller_never_chooses_what_is_good(lab: Any, faults: Any) -> None:
    conf = "/etc/postgresql/15/main/postgresql.conf"
    rc, answer = ask(lab, check("postgresql", keep_known_good=False))  # the caller asks the host to keep nothing
    assert rc == 0 and answer["check"]["healthy"], answer
    kept = sh(lab, NODE, "sh", "-c", "cat /var/lib/sentinel-heal/known-good/postgresql/manifest.json")
    assert conf in kept, kept  # kept all the same: what is good is the host's to say
    good = sh(lab, NODE, "sha256sum", conf).split()[0]
    sh(lab, NODE, "sh", "-c", f"echo '# an administrator hardening it' >> {conf}")
    try:
        before = snapshot(lab)
        for plan, rule in (([["systemctl", "restart", "postgresql@15-main"]], "service-healthy"),
                           ([["sentinel-heal-restore", conf, good]], "restore-not-the-incidents"),  # no changed file of an incident
                           ([["chown", "-R", "postgres:postgres", "/var/lib/postgresql/15/main"]], "service-healthy")):
            refused_once(lab, step(lab, "postgresql", *plan), rule=rule)
        assert snapshot(lab) == before
    finally:
        sh(lab, NODE, "sed", "-i", "/# an administrator hardening it/d", conf)


def test_3_with_the_maintenance_marker_or_in_observe_or_review_mode_no_request_of_any_kind_changes_anything(lab: Any, faults: Any) -> None:
    faults.inject(NODE, "nginx-killed")
    requests = [step(lab, "nginx", ["systemctl", "start", "nginx"]),
                step(lab, "nginx", ["systemctl", "status", "nginx"], kind="read"),
                step(lab, "nginx", ["sentinel-heal-restore", "/etc/nginx/nginx.conf", "0" * 64]),
                step(lab, "nginx", ["chown", "-R", "www-data:adm", "/var/log/nginx"]),
                step(lab, "nginx", ["kill", "-TERM", sh(lab, NODE, "pgrep", "-o", "-x", "cron").strip() or "2"])]
    sh(lab, NODE, "sh", "-c", f"printf 'reason: the attacker test\\nby: alice\\n' > {MARKER}")
    try:
        before = snapshot(lab)
        for request in requests:
            response = refused_once(lab, request, rule="maintenance")
            assert "in maintenance by alice" in response["reason"], response
        rc, checked = ask(lab, check("nginx"))  # a check still reads, and keeps nothing as good
        assert rc == 0 and checked["check"]["facts"]["maintenance"]["by"] == "alice", checked
        assert sh(lab, NODE, "sh", "-c", "ls /var/lib/sentinel-heal/known-good/nginx 2>&1 || true").count("manifest") == 0
        assert snapshot(lab) == before
    finally:
        sh(lab, NODE, "rm", "-f", MARKER)
    declared = "/etc/sentinel-heal/services.json"
    sh(lab, NODE, "cp", "-p", declared, "/root/services.json.aside")
    try:
        for mode in ("observe", "review"):
            sh(lab, NODE, "python3", "-c", "import json, sys; p = sys.argv[1]; d = json.load(open(p)); d['mode'] = sys.argv[2]; "
               "open(p, 'w').write(json.dumps(d))", declared, mode)
            before = snapshot(lab)
            response = refused_once(lab, step(lab, "nginx", ["systemctl", "start", "nginx"]))
            assert f"{mode} mode" in response["reason"], (mode, response)
            assert snapshot(lab) == before and sh(lab, NODE, "systemctl", "is-active", "nginx").strip() != "active"
    finally:
        sh(lab, NODE, "cp", "-p", "/root/services.json.aside", declared)
        sh(lab, NODE, "rm", "-f", "/root/services.json.aside")


def test_4_a_redis_of_the_redis_account_outside_systemd_and_root_daemons_outside_the_unit_are_never_signalled(lab: Any, faults: Any) -> None:
    faults.inject(NODE, "redis-killed")
    sh(lab, NODE, "runuser", "-u", "redis", "--", "redis-server", "--port", "6390", "--daemonize", "yes", "--pidfile", "/tmp/second-redis.pid",
       "--dir", "/tmp", "--save", "", "--logfile", "")
    try:
        time.sleep(0.5)
        second = sh(lab, NODE, "cat", "/tmp/second-redis.pid").strip()
        roots = [sh(lab, NODE, "systemctl", "show", "-p", "MainPID", "--value", f"{unit}.service").strip() for unit in ("ssh", "cron", "dbus")]
        targets = [second, *[pid for pid in roots if pid not in ("", "0")]]
        assert second.isdigit() and len(targets) >= 3, targets
        before = snapshot(lab)
        for pid in targets:
            response = refused_once(lab, step(lab, "redis", ["kill", "-TERM", pid]))
            assert response["rule"] != "signal-own-process", response
        assert sh(lab, NODE, "sh", "-c", f"kill -0 {' '.join(targets)} && echo alive").strip() == "alive"
        assert snapshot(lab) == before
    finally:
        sh(lab, NODE, "sh", "-c", "kill $(cat /tmp/second-redis.pid); rm -f /tmp/second-redis.pid")


def test_4_a_pid_reused_by_another_process_before_the_kill_is_refused_and_the_impostor_lives(lab: Any, faults: Any) -> None:
    """The controller planned kill -TERM PID for redis's own process; redis ended and the redis account's sleep took the
    same pid (ns_last_pid set to PID-1 in the host's pid namespace) before the request came."""
    planned = sh(lab, NODE, "cat", "/run/redis/redis-server.pid").strip()
    faults.inject(NODE, "redis-killed")
    impostor = ""
    try:
        for attempt in range(9):  # another process of the host may take a pid first: one to three before it
            # setsid forks (the pid wanted) and setpriv execs sleep as redis
            sh(lab, NODE, "sh", "-c", f"echo {int(planned) - 1 - attempt % 3} > /proc/sys/kernel/ns_last_pid; "
               "setsid -f setpriv --reuid=redis --regid=redis --clear-groups sleep 600 </dev/null >/dev/null 2>&1")
            time.sleep(0.3)
            impostor = sh(lab, NODE, "pgrep", "-u", "redis", "-x", "sleep").strip()
            if impostor == planned:
                break
            sh(lab, NODE, "pkill", "-u", "redis", "-x", "sleep")
        assert impostor == planned, (impostor, planned)
        before = snapshot(lab)
        response = refused_once(lab, step(lab, "redis", ["kill", "-TERM", planned]))
        assert response["rule"] != "signal-own-process", response
        assert sh(lab, NODE, "ps", "-o", "user=,comm=", "-p", planned).split() == ["redis", "sleep"]
        assert snapshot(lab) == before
    finally:
        sh(lab, NODE, "pkill", "-u", "redis", "-x", "sleep")


def test_5_the_services_links_lead_nowhere_outside_it(lab: Any, faults: Any) -> None:
    """The redis account swaps its log for a link to /etc/shadow: the check's tail never shows shadow. A restore through
    redis.conf swapped for a link to /etc/passwd is refused; a chown -R over a tree with a hard link to /etc/shadow
    never reaches shadow."""
    log = "/var/log/redis/redis-server.log"
    sh(lab, NODE, "runuser", "-u", "redis", "--", "sh", "-c", f"mv {log} {log}.aside && ln -s /etc/shadow {log}")
    try:
        rc, answer = ask(lab, check("redis", log_lines=50))
        assert rc == 0, answer
        no_secret_in(answer, lab)
    finally:
        sh(lab, NODE, "runuser", "-u", "redis", "--", "sh", "-c", f"rm -f {log} && mv {log}.aside {log}")
    faults.inject(NODE, "redis-log-dir-root-owned")
    conf = "/etc/redis/redis.conf"
    sh(lab, NODE, "sh", "-c", f"mv {conf} {conf}.aside && ln -s /etc/passwd {conf} && ln /etc/shadow /var/log/redis/shadow-link")
    try:
        before = snapshot(lab, "redis-server")  # systemd starts redis again and again, failing
        refused_once(lab, step(lab, "redis", ["sentinel-heal-restore", conf, sh(lab, NODE, "sha256sum", "/etc/passwd").split()[0]]))
        rc, response = ask(lab, step(lab, "redis", ["chown", "-R", "redis:adm", "/var/log/redis"]))
        assert rc != 0 and "shadow-link" in json.dumps(response), response  # the hard link stops the walk, named
        assert snapshot(lab, "redis-server") == before
    finally:
        sh(lab, NODE, "sh", "-c", f"rm -f {conf} /var/log/redis/shadow-link && mv {conf}.aside {conf}")


def test_5_a_file_swapped_for_a_link_between_the_check_and_the_step_changes_nothing_outside_the_service(lab: Any, faults: Any) -> None:
    faults.inject(NODE, "redis-log-file-root-owned")
    log = "/var/log/redis/redis-server.log"
    request = step(lab, "redis", ["chown", "redis:adm", log])  # judged from the check, as the controller planned it
    sh(lab, NODE, "runuser", "-u", "redis", "--", "sh", "-c", f"mv {log} {log}.aside && ln -s /etc/shadow {log}")
    try:
        before = snapshot(lab, "redis-server")  # systemd starts redis again and again, failing
        _rc, response = ask(lab, request)
        # refused, or (the executor's no-follow repair) the link itself given to redis:adm, never what it leads to
        assert response["refused"] or sh(lab, NODE, "stat", "-c", "%U:%G %F", log).strip() == "redis:adm symbolic link", response
        assert snapshot(lab, "redis-server") == before
    finally:
        sh(lab, NODE, "sh", "-c", f"rm -f {log} && mv {log}.aside {log}")


def test_6_operands_that_are_lists_of_root_only_files_are_refused(lab: Any, faults: Any) -> None:
    faults.inject(NODE, "nginx-killed")
    as_healing_account(lab, "sh", "-c", "echo /etc/shadow > /tmp/attack-list")
    sh(lab, NODE, "sh", "-c", "sha256sum /etc/shadow | runuser -u sentinel -- tee /tmp/attack-sums >/dev/null")
    try:
        before = snapshot(lab)
        for argv in (["file", "-f", "/tmp/attack-list"], ["file", "-m", "/etc/shadow", "/etc/nginx/nginx.conf"],
                     ["sha256sum", "-c", "/tmp/attack-sums"], ["file", "-f", "/etc/shadow"]):
            response = refused_once(lab, step(lab, "nginx", argv))
            no_secret_in(response, lab)
        assert snapshot(lab) == before
    finally:
        sh(lab, NODE, "rm", "-f", "/tmp/attack-list", "/tmp/attack-sums")


def test_8_with_sudo_keeping_path_a_fake_systemctl_of_the_callers_never_runs(lab: Any, faults: Any) -> None:
    faults.inject(NODE, "nginx-killed")
    keep_path = "/etc/sudoers.d/zz-attack-keep-path"
    sh(lab, NODE, "sh", "-c", f"printf 'Defaults:sentinel env_keep += \"PATH\"\\nDefaults:sentinel !secure_path\\n' > {keep_path}; "
       f"chmod 0440 {keep_path}")
    as_healing_account(lab, "sh", "-c", "mkdir -p /tmp/attack-bin && printf '#!/bin/sh\\ntouch /tmp/attack-ran\\n' > /tmp/attack-bin/systemctl"
                       " && chmod 755 /tmp/attack-bin/systemctl")
    try:
        assert "PATH" in as_healing_account(lab, "sudo", "-n", "-l").stdout  # sudo keeps it now
        request = step(lab, "nginx", ["systemctl", "status", "nginx"], kind="read")
        for sent in (check("nginx"), request):
            proc = lab.run_in(NODE, ["runuser", "-u", "sentinel", "--", "env", "PATH=/tmp/attack-bin:/usr/bin:/bin", "sudo", "-n", EXEC],
                              input_text=json.dumps(sent), timeout=60)
            assert json.loads(proc.stdout)["refused"] is False, proc.stdout
        assert sh(lab, NODE, "sh", "-c", "test -e /tmp/attack-ran && echo ran || echo never").strip() == "never"
    finally:
        sh(lab, NODE, "rm", "-rf", keep_path, "/tmp/attack-bin", "/tmp/attack-ran")


def test_9_a_read_of_redis_conf_with_a_password_never_returns_the_password(lab: Any, faults: Any) -> None:
    """Debian's /etc/redis is the redis account's: a read as root there could be led elsewhere, so the host refuses it
    rather than run it (where the directory is root's, the read comes back redacted: test_executor's unit test of
    redis.conf and users.acl)."""
    conf = "/etc/redis/redis.conf"
    password = "attack-lab-" + uuid.uuid4().hex
    sh(lab, NODE, "cp", "-p", conf, "/root/redis.conf.aside")
    sh(lab, NODE, "sh", "-c", f"echo 'requirepass {password}' >> {conf}")
    try:
        rc, response = ask(lab, step(lab, "redis", ["cat", conf], kind="read"))
        assert password not in json.dumps(response), response
        assert (rc, response["rule"]) == (REFUSED, "read-could-be-redirected"), response
        assert "/etc/redis is not root's" in response["reason"], response
    finally:
        sh(lab, NODE, "cp", "-p", "/root/redis.conf.aside", conf)
        sh(lab, NODE, "rm", "-f", "/root/redis.conf.aside")


def test_7_a_request_near_the_size_limit_is_one_bounded_entry_and_a_burst_is_counted_not_written(lab: Any) -> None:
    """Last in the file: its burst spends the healing account's minute of entries."""
    big = step(lab, "nginx", ["cat", "\x1b[31m" + "é" * ((MAX_REQUEST_BYTES - 3000) // 6)])  # each é is 6 bytes of JSON
    assert MAX_REQUEST_BYTES - 4096 < len(json.dumps(big).encode()) <= MAX_REQUEST_BYTES
    refused_once(lab, big)
    before = len(log_lines(lab))
    wrong = json.dumps({"host": NODE, "kind": "check", "services": ["nginx"], "policy_version": "0123456789abcdef"})
    # 130 sudo runs of the executor: half a minute on an idle machine, more beside the checks' processes
    lab.run_in(NODE, ["sh", "-c", f"for i in $(seq 130); do echo '{wrong}' | runuser -u sentinel -- sudo -n {EXEC} >/dev/null; done"], timeout=240)
    written = [line for line in log_lines(lab)[before:] if '"decision": "refused"' in line]
    assert len(written) < 130, len(written)  # the minute's first LOG_RATE (the tests before spent some of them)
    deadline = time.time() + 150
    said: list[dict[str, Any]] = []
    while len(written) + sum(entry["suppressed"] for entry in said) < 130 and time.time() < deadline:
        time.sleep(10)
        ask(lab, check("nginx"))  # the first request of the caller's next minute says what the last one suppressed
        said = [json.loads(line) for line in log_lines(lab)[before:] if '"decision": "suppressed"' in line]
    assert said and all(entry["reason"] == f"{entry['suppressed']} requests suppressed (over {LOG_RATE} a minute)" for entry in said), said
    assert len(written) + sum(entry["suppressed"] for entry in said) >= 130, (len(written), said)
