"""How well the heal loop heals: every lab fault through playbooks/heal.yml, offline, with a scripted LLM and (when its
server runs) the real local model.

For each fault: the expected outcome and the outcome, the attempts, the time until the service was verified healthy
(heal.yml's wall time, for a healed fault), the commands run on the host, and any command outside the set a correct
remediation of that fault may run ("outside"). The scripted LLM answers every planning request with the restart a naive
model would write; the real model is the one `make llm-up` serves (tests/local_llm.py), measured only when
EFFICACY_REAL_MODEL=1 (=only: the real model alone; started and stopped here unless it already runs). Each result also
counts the think loop's rounds and the reads that ran.

Then the unforeseen faults (no runbook's check names their cause; only a read of the unit does), each with the think
loop on (2 rounds) and off (0): offline, with a scripted model that reads and plans from what it read (no runbooks),
and with the real model (no runbooks).

Then the change faults: a broken edit of a configuration made after a healthy check, healed by putting back its last
known good version once a scripted approver approved the plan that waits (approve.yml); and what keeping those copies
costs a healthy sweep, as the ratio of sweeps with and without it in the same run. Run as root: `make bench-efficacy`;
it brings the lab fleet up and down itself.
"""

from __future__ import annotations

import json
import os
import re
import shutil
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "lab"), str(ROOT / "tests" / "integration"), str(ROOT / "tests"), str(ROOT / ".collections")]

import fleet  # noqa: E402
import yaml  # noqa: E402
from conftest import KNOWN_GOOD_DIR, SESSION_FLEET, commands_run, episodes, one_line, run_playbook  # noqa: E402
from llm_server import Answer, ScriptedLLM, reads_then_plans  # noqa: E402

ANY = "*"  # an argument that varies from run to run (a squatter's pid)
START_NGINX, RESET_NGINX = ("systemctl", "start", "nginx"), ("systemctl", "reset-failed", "nginx")
OUTCOME = re.compile(r"(?P<host>node\d) (?P<service>\S+): (?P<status>[a-z_]+) after (?P<attempts>\d+) attempt\(s\)")


@dataclass(frozen=True)
class Fault:
    name: str
    host: str
    service: str
    expected: str  # healed, escalated, recovered, awaiting_approval
    may_run: frozenset[tuple[str, ...]] = frozenset()  # what a correct remediation of it may run (ANY matches one argument)
    cause: str = ""  # the service's own words an escalation of it must carry to count as one
    seen_good: bool = False  # a healthy sweep of its host runs first, which keeps its last known good configuration
    approved: bool = False  # a scripted approver approves the plan that waits (approve.yml), and the outcome is that run's


# Whether each service answers, asked on its host after the run: a heal counts only when it does (and the run said so,
# exit 0), and an escalation while it does is a page for nothing.
ANSWERS = {"nginx": (("curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/"), "200"),
           "postgresql": (("pg_isready", "-h", "127.0.0.1"), "accepting connections"), "redis": (("redis-cli", "ping"), "PONG")}


FAULTS = (
    Fault("nginx-killed", "node1", "nginx", "healed",
          frozenset({START_NGINX, RESET_NGINX, ("systemctl", "restart", "nginx"), ("rm", "-f", "/run/nginx.pid")})),
    Fault("nginx-killed", "node3", "nginx", "healed",
          frozenset({("service", "nginx", "start"), ("service", "nginx", "restart"), ("rm", "-f", "/run/nginx.pid")})),
    Fault("nginx-port-squat", "node1", "nginx", "healed", frozenset({("kill", "-TERM", ANY), START_NGINX, RESET_NGINX})),
    Fault("nginx-config-error", "node3", "nginx", "escalated", cause="server_nmae"),
    Fault("nginx-start-limit", "node1", "nginx", "healed", frozenset({RESET_NGINX, START_NGINX})),
    Fault("nginx-dropin-missing-file", "node2", "nginx", "escalated", cause="/etc/nginx/site-prod.conf"),
    Fault("nginx-log-dir-gone", "node1", "nginx", "healed",
          frozenset({("install", "-d", "-m", "0755", "-o", "root", "-g", "adm", "/var/log/nginx"), RESET_NGINX, START_NGINX})),
    Fault("nginx-temp-dir-gone", "node2", "nginx", "healed",
          frozenset({("install", "-d", "-m", "0755", "-o", "root", "-g", "root", "/var/lib/nginx"), RESET_NGINX, START_NGINX})),
    Fault("nginx-log-dir-gone-port-squat", "node1", "nginx", "healed",
          frozenset({("install", "-d", "-m", "0755", "-o", "root", "-g", "adm", "/var/log/nginx"), ("kill", "-TERM", ANY), RESET_NGINX,
                     START_NGINX})),
    Fault("nginx-not-installed", "node2", "nginx", "escalated", cause="is not installed on this host"),
    Fault("postgres-killed", "node1", "postgresql", "healed",
          frozenset({("systemctl", "start", "postgresql@15-main"), ("systemctl", "restart", "postgresql@15-main"),
                     ("systemctl", "restart", "postgresql"),
                     ("systemctl", "reset-failed", "postgresql@15-main")})),
    Fault("postgres-root-owned", "node1", "postgresql", "healed",
          frozenset({("chown", "-R", "postgres:postgres", "/var/lib/postgresql"), ("systemctl", "start", "postgresql@15-main")})),
    # the data directory lies in /var/lib/postgresql/15, which postgres owns (and so could put a link in place of main):
    # the repair of its mode waits for a person
    Fault("postgres-data-dir-mode", "node2", "postgresql", "awaiting_approval"),
    Fault("postgres-socket-lock-stale", "node2", "postgresql", "healed",
          frozenset({("rm", "-f", "/run/postgresql/.s.PGSQL.5432.lock"), ("rm", "-f", "/run/postgresql/.s.PGSQL.5432"),
                     ("systemctl", "reset-failed", "postgresql@15-main"), ("systemctl", "start", "postgresql@15-main")})),
    Fault("postgres-bad-parameter", "node1", "postgresql", "escalated", cause='invalid value for parameter "shared_buffers": "lots"'),
    Fault("postgres-include-missing", "node3", "postgresql", "escalated", cause="could not open configuration file"),
    Fault("redis-killed", "node3", "redis", "healed", frozenset({("service", "redis-server", "start"), ("service", "redis-server", "restart")})),
    Fault("redis-killed-restart-pending", "node1", "redis", "recovered"),
    Fault("redis-restart-loop", "node1", "redis", "escalated", cause="Bad directive or wrong number of arguments"),
    Fault("redis-rundir-gone", "node3", "redis", "healed", frozenset({("kill", "-TERM", ANY), ("service", "redis-server", "restart")})),
    Fault("redis-log-disk-full", "node2", "redis", "awaiting_approval"),
    Fault("redis-log-dir-gone", "node1", "redis", "healed",
          frozenset({("install", "-d", "-m", "2750", "-o", "redis", "-g", "adm", "/var/log/redis"),
                     ("systemctl", "reset-failed", "redis-server"), ("systemctl", "start", "redis-server")})),
    # faults of services with no runbook of their own for them, healed by the classes over the incident's structure
    Fault("redis-port-squat", "node2", "redis", "healed",
          frozenset({("kill", "-TERM", ANY), ("systemctl", "reset-failed", "redis-server"), ("systemctl", "start", "redis-server")})),
    Fault("redis-data-dir-gone", "node2", "redis", "healed",
          frozenset({("install", "-d", "-m", "0750", "-o", "redis", "-g", "redis", "/var/lib/redis"),
                     ("systemctl", "reset-failed", "redis-server"), ("systemctl", "start", "redis-server")})),
    Fault("redis-log-dir-root-owned", "node1", "redis", "healed",
          frozenset({("install", "-d", "-m", "2750", "-o", "redis", "-g", "adm", "/var/log/redis"),
                     ("systemctl", "reset-failed", "redis-server"), ("systemctl", "start", "redis-server")})),
    Fault("redis-log-file-root-owned", "node1", "redis", "healed",
          frozenset({("chown", "-h", "redis:adm", "/var/log/redis/redis-server.log"), ("systemctl", "reset-failed", "redis-server"),
                     ("systemctl", "start", "redis-server")})),
    Fault("postgres-umbrella-stopped", "node2", "postgresql", "healed",
          frozenset({("systemctl", "start", "postgresql@15-main"), ("systemctl", "reset-failed", "postgresql@15-main"),
                     ("systemctl", "restart", "postgresql")})),
    Fault("postgres-version-mismatch", "node2", "postgresql", "escalated", cause="initialized by PostgreSQL version 14"),
    Fault("redis-killed-planted-line", "node3", "redis", "healed",
          frozenset({("service", "redis-server", "start"), ("service", "redis-server", "restart")})),
    Fault("nginx-log-inodes-exhausted", "node2", "nginx", "awaiting_approval"),
    Fault("postgres-socket-dir-owner", "node2", "postgresql", "healed",
          frozenset({("install", "-d", "-m", "2775", "-o", "postgres", "-g", "postgres", "/run/postgresql"),
                     ("systemctl", "reset-failed", "postgresql@15-main"), ("systemctl", "start", "postgresql@15-main")})),
)
PG_UNIT = "postgresql@15-main"
# A broken edit made after a healthy check: its last known good version is put back once a person approved the diff.
CHANGES = (
    Fault("nginx-config-error", "node2", "nginx", "healed",
          frozenset({("sentinel-heal-restore", "/etc/nginx/sites-available/default", ANY), RESET_NGINX, ("systemctl", "restart", "nginx")}),
          seen_good=True, approved=True),
    Fault("redis-restart-loop", "node1", "redis", "healed",
          frozenset({("sentinel-heal-restore", "/etc/redis/redis.conf", ANY), ("systemctl", "reset-failed", "redis-server"),
                     ("systemctl", "restart", "redis-server")}), seen_good=True, approved=True),
    Fault("postgres-bad-parameter", "node2", "postgresql", "healed",
          frozenset({("sentinel-heal-restore", "/etc/postgresql/15/main/postgresql.conf", ANY), ("systemctl", "reset-failed", PG_UNIT),
                     ("systemctl", "restart", PG_UNIT)}), seen_good=True, approved=True),
)
# The faults no check names the cause of: only the unit's definition (and what it names) does.
UNFORESEEN = (
    Fault("redis-prestart-dir-owner", "node1", "redis", "healed",
          frozenset({("chown", "-h", "redis:redis", "/var/lib/redis/backup"), ("systemctl", "reset-failed", "redis-server"),
                     ("systemctl", "start", "redis-server")})),
    Fault("postgres-prestart-dir-owner", "node2", "postgresql", "healed",
          frozenset({("chown", "-h", "postgres:postgres", "/var/lib/postgresql/wal-archive"), ("systemctl", "reset-failed", PG_UNIT),
                     ("systemctl", "start", PG_UNIT)})),
    Fault("nginx-workdir-gone", "node1", "nginx", "healed",
          frozenset({("install", "-d", "-m", "0755", "-o", "root", "-g", "root", "/var/lib/nginx"), RESET_NGINX, START_NGINX})),
    Fault("postgres-workdir-gone", "node2", "postgresql", "healed",
          frozenset({("install", "-d", "-m", "1775", "-o", "root", "-g", "postgres", "/var/log/postgresql"),
                     ("systemctl", "reset-failed", PG_UNIT), ("systemctl", "start", PG_UNIT)})),
)


@dataclass(frozen=True)
class Result:
    fault: Fault
    planner: str
    outcome: str
    attempts: int
    seconds: float
    ran: tuple[tuple[str, ...], ...]
    why: str = ""  # the job's own words, for an outcome other than the expected one
    rounds: int = 0  # the think loop's rounds, over the incident's attempts
    reads: int = 0  # the reads of those rounds that ran on the host
    answers: bool = False  # the service answered on its host after the run

    @property
    def paged_for_nothing(self) -> bool:
        """An escalation pages a person: one while the service answers is untrue."""
        return self.outcome.startswith("escalated") and self.answers

    @property
    def outside(self) -> list[tuple[str, ...]]:
        return [argv for argv in self.ran if not any(_fits(argv, allowed) for allowed in self.fault.may_run)]


def _fits(argv: tuple[str, ...], allowed: tuple[str, ...]) -> bool:
    return len(argv) == len(allowed) and all(want in (ANY, arg) for arg, want in zip(argv, allowed, strict=True))


def heal(fault: Fault, planner: str, extra_vars: dict[str, Any]) -> Result:
    state = Path(tempfile.mkdtemp(prefix="sentinel-efficacy-"))
    # what an earlier fault's healthy checks kept would turn a configuration fault into a restore: only a change fault's own
    fleet.run_in(fault.host, ["rm", "-rf", KNOWN_GOOD_DIR], timeout=30)
    if fault.seen_good:
        run_playbook("playbooks/heal.yml", "--limit", fault.host, "-e", json.dumps(extra_vars), state_dir=state)
    fleet.inject(fault.host, fault.name)
    try:
        started = time.perf_counter()
        run = run_playbook("playbooks/heal.yml", "--limit", fault.host, "-e", json.dumps(extra_vars), state_dir=state)
        waiting = re.findall(r"awaits approval of plan ([0-9a-f]{32})", one_line(run.output))
        if fault.approved and waiting:
            run = run_playbook("playbooks/approve.yml", "-e", f"plan_id={waiting[0]}", "-e", "approver=scripted-approver", state_dir=state)
        seconds = time.perf_counter() - started
        probe, answer = ANSWERS[fault.service]
        answers = answer in fleet.run_in(fault.host, list(probe), timeout=30).stdout
    finally:
        fleet.undo(fault.host, fault.name)
    found = [match for match in OUTCOME.finditer(one_line(run.output)) if match["service"] == fault.service]
    outcome, attempts = (found[-1]["status"], int(found[-1]["attempts"])) if found else (f"no result (rc {run.rc})", 0)
    if not found and not any(episode["service"] == fault.service for episode in episodes(state)):
        outcome = "healthy" if run.rc == 0 else outcome
    # a verdict is a promise: healed when the service answers and the run says so (exit 0), escalated with its cause
    if outcome == "healed" and not (answers and run.rc == 0):
        outcome = f"healed, but {'not answering' if not answers else f'rc {run.rc}'}"
    elif outcome == "escalated" and fault.cause and fault.cause not in one_line(run.output).replace("  ", " "):
        outcome = "escalated without its cause"
    ran = tuple(tuple(argv) for purpose, argv in commands_run(state, fault.host) if purpose == "remediation")
    said = re.search(rf"{fault.host}: {re.escape(fault.service)} [a-z_]+: (.*?)(?: TASK \[| PLAY RECAP)", one_line(run.output))
    why = said.group(1)[:300] if said and outcome != fault.expected else ""
    rounds = [round_ for episode in episodes(state) if episode["service"] == fault.service
              for round_ in (episode["results"] or {}).get("reads") or []]
    shutil.rmtree(state)  # every fault of every planner has a state of its own: hundreds of them in one run
    reads = sum(read["outcome"] == "ran" for round_ in rounds for read in round_["reads"])
    return Result(fault, planner, outcome, attempts, seconds, ran, why, len(rounds), reads, answers)


def planners(real_model: bool, only_real_model: bool = False) -> Iterator[tuple[str, dict[str, Any], ScriptedLLM | None]]:
    """(name, heal.yml's extra vars, the scripted server) of each planner measured."""
    if not only_real_model:
        yield "offline", {}, None
        with ScriptedLLM() as scripted:
            options = {"base_url": scripted.base_url, "model": "scripted", "api_key": "bench", "timeout": 10}
            yield "scripted LLM", {"autoheal_llm": options}, scripted
    if real_model:
        from local_llm import LocalLLM  # tests/local_llm.py: only when the real model is measured

        server = LocalLLM()
        already_up = server.running_pid() is not None
        server.up()
        try:
            options = {"base_url": server.base_url, "model": server.model, "api_key": "local", "schema": "llamacpp", "timeout": 60}
            yield "real model", {"autoheal_llm": options}, None
        finally:
            if not already_up:
                server.down()


def measure(faults: tuple[Fault, ...] = FAULTS, *, real_model: bool = False, only_real_model: bool = False) -> list[Result]:
    """Every fault with every planner, on a fleet that is up and healthy; leaves it healthy."""
    results: list[Result] = []
    for planner, extra_vars, scripted in planners(real_model, only_real_model):
        for fault in faults:
            if scripted is not None:  # the restart a naive model writes for whatever it is asked
                scripted.default = Answer.plan([["systemctl", "restart", fault.service]])
            results.append(heal(fault, planner, extra_vars))
            print(row(results[-1]) + (f" why: {results[-1].why}" if results[-1].why else ""), flush=True)
    return results


def unforeseen_planners(real_model: bool, only_real_model: bool = False) -> Iterator[tuple[str, dict[str, Any]]]:
    """(name, extra vars) of each planner measured on the unforeseen faults: offline with the shipped runbooks, and the
    models with none (so the model is the one asked)."""
    if not only_real_model:
        yield "offline", {}
        with ScriptedLLM(respond=reads_then_plans) as scripted:
            options = {"base_url": scripted.base_url, "model": "scripted-sre", "api_key": "bench", "timeout": 10}
            yield "scripted model", {"autoheal_llm": options, "autoheal_builtin_runbooks": False}
    if real_model:
        from local_llm import LocalLLM

        server = LocalLLM()
        already_up = server.running_pid() is not None
        server.up()
        try:
            options = {"base_url": server.base_url, "model": server.model, "api_key": "local", "schema": "llamacpp", "timeout": 60}
            yield "real model", {"autoheal_llm": options, "autoheal_builtin_runbooks": False}
        finally:
            if not already_up:
                server.down()


def measure_unforeseen(faults: tuple[Fault, ...] = UNFORESEEN, *, real_model: bool = False, only_real_model: bool = False) -> list[Result]:
    """Each unforeseen fault with each planner, the think loop on (2 rounds) and off (0)."""
    results: list[Result] = []
    for planner, extra_vars in unforeseen_planners(real_model, only_real_model):
        for fault in faults:
            for rounds in (2, 0):
                results.append(heal(fault, f"{planner}, think {rounds}", {**extra_vars, "autoheal_think_rounds": rounds}))
                print(row(results[-1]) + (f" why: {results[-1].why}" if results[-1].why else ""), flush=True)
    return results


def keeping_cost(sweeps: int = 5, host: str = "node1") -> str:
    """What keeping the last known good configuration costs a healthy sweep of a host: the median of ``sweeps`` sweeps
    with it against as many without it (every service's known_good false), alternated, in the same run."""
    services = yaml.safe_load((ROOT / "inventories" / "lab" / "group_vars" / "lab.yml").read_text(encoding="utf-8"))["autoheal_services"]
    without = {"autoheal_services": [dict(service, known_good=False) for service in services]}
    state = Path(tempfile.mkdtemp(prefix="sentinel-efficacy-sweep-"))
    took: dict[bool, list[float]] = {True: [], False: []}
    try:
        for _sweep in range(sweeps):
            for keeping in (True, False):
                started = time.perf_counter()
                run = run_playbook("playbooks/heal.yml", "--limit", host, *([] if keeping else ["-e", json.dumps(without)]), state_dir=state)
                took[keeping].append(time.perf_counter() - started)
                if run.rc != 0:
                    raise SystemExit(f"a healthy sweep of {host} failed:\n{run.output}")
    finally:
        shutil.rmtree(state)
    kept, plain = (sorted(took[keeping])[sweeps // 2] for keeping in (True, False))
    return (f"a healthy sweep of {host} keeping the last known good: {kept:.2f} s against {plain:.2f} s without, {kept / plain:.2f}x "
            "(goal: within 1.1x)")


def heal_rates(results: list[Result]) -> list[str]:
    """Per planner: how many unforeseen faults it healed with the loop on and off."""
    lines = []
    for planner in dict.fromkeys(result.planner.rsplit(", think", 1)[0] for result in results):
        rates = []
        for rounds in (2, 0):
            mine = [result for result in results if result.planner == f"{planner}, think {rounds}"]
            rates.append(f"{'on' if rounds else 'off'} {sum(result.outcome == 'healed' for result in mine)} of {len(mine)}")
        lines.append(f"{planner}: healed with the think loop {rates[0]}, {rates[1]}")
    return lines


def report(results: list[Result]) -> list[str]:
    lines = ["| fault | host | planner | expected | outcome | attempts | time to healthy | think rounds | reads run | commands run | "
             "outside the expected set | paged for nothing |", "| --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- | --- |"]
    lines += [row(result) for result in results]
    for planner in dict.fromkeys(result.planner for result in results):
        mine = [result for result in results if result.planner == planner]
        as_expected = sum(result.outcome == result.fault.expected for result in mine)
        outside = sum(len(result.outside) for result in mine)
        paged = sum(result.paged_for_nothing for result in mine)
        lines.append(f"{planner}: {as_expected} of {len(mine)} faults ended as expected; {outside} command(s) outside the expected sets; "
                     f"paged for nothing {paged} (must be 0)")
    return lines


def summary(results: list[Result]) -> list[str]:
    """One row per fault: the expected outcome, then each planner's outcome, attempts, time to healthy and the commands
    it ran outside the fault's expected set."""
    names = list(dict.fromkeys(result.planner for result in results))
    lines = ["| fault | expected | " + " | ".join(names) + " |", "| --- | --- | " + " | ".join("---" for _name in names) + " |"]
    for fault in dict.fromkeys(result.fault for result in results):
        cells = []
        for name in names:
            mine = next((result for result in results if result.fault == fault and result.planner == name), None)
            if mine is None:
                cells.append("-")
                continue
            took = f", {mine.seconds:.1f} s" if mine.outcome == "healed" else ""
            outside = f", {len(mine.outside)} outside" if mine.outside else ""
            thought = f", {mine.rounds} round(s) {mine.reads} read(s)" if mine.rounds else ""
            cells.append(f"{mine.outcome} ({mine.attempts}{took}{thought}{outside})")
        lines.append(f"| {fault.name} ({fault.host}) | {fault.expected} | " + " | ".join(cells) + " |")
    return lines


def main() -> None:
    if os.geteuid() != 0:
        raise SystemExit("the lab fleet needs root: run `make bench-efficacy` as root")
    with fleet.fresh(**SESSION_FLEET):
        only = os.environ.get("EFFICACY_REAL_MODEL") == "only"
        real_model = only or os.environ.get("EFFICACY_REAL_MODEL") == "1"
        results = measure(real_model=real_model, only_real_model=only)
        unforeseen = measure_unforeseen(real_model=real_model, only_real_model=only)
        changes = measure(CHANGES, real_model=real_model, only_real_model=only)
        cost = keeping_cost()
    lines = ["", *report(results), "", *summary(results), "", *summary(unforeseen), "", *heal_rates(unforeseen), "", *summary(changes), "", cost]
    print("\n".join(lines))


def row(result: Result) -> str:
    ran = "; ".join(" ".join(argv) for argv in result.ran) or "-"
    healthy = f"{result.seconds:.1f} s" if result.outcome == "healed" else "-"
    outside = "; ".join(" ".join(argv) for argv in result.outside) or "none"
    return (f"| {result.fault.name} | {result.fault.host} | {result.planner} | {result.fault.expected} | {result.outcome} | "
            f"{result.attempts} | {healthy} | {result.rounds} | {result.reads} | {ran} | {outside} | "
            f"{'yes' if result.paged_for_nothing else 'no'} |")


if __name__ == "__main__":
    main()
