"""Integration tests against the lab fleet: real hosts, real services, the real playbook.

The fleet is started once per session and torn down at the end, also when a test fails.
Each test undoes the faults it injected, so the next one starts from a healthy fleet.
"""

from __future__ import annotations

import json
import os
import re
import sqlite3
import subprocess
import sys
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Iterator

import pytest

ROOT = Path(__file__).resolve().parents[2]
sys.path.insert(0, str(ROOT / "tests" / "lab"))

import fleet  # noqa: E402  (tests/lab is not a package)
from postgres_server import PostgresServer, bridged_server  # noqa: E402

from ansible_collections.sentinel.heal.plugins.module_utils._host.host_configuration import EXECUTOR_PATH  # noqa: E402
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.placeholders import STEP_PLACEHOLDERS  # noqa: E402

RECAP = re.compile(
    r"^(?P<host>\S+)\s+:\s+ok=(?P<ok>\d+)\s+changed=(?P<changed>\d+)\s+unreachable=(?P<unreachable>\d+)\s+failed=(?P<failed>\d+)", re.M,
)


@dataclass
class PlaybookRun:
    rc: int
    output: str

    @property
    def recap(self) -> dict[str, dict[str, int]]:
        return {m["host"]: {k: int(m[k]) for k in ("ok", "changed", "unreachable", "failed")} for m in RECAP.finditer(self.output)}


def one_line(text: str) -> str:
    """A job's output with the YAML callback's line wrapping undone."""
    return " ".join(text.split())


# A runbook's placeholder that reached a job's output unrendered: what a person reads must never hold one.
PLACEHOLDER_NAMES = "|".join(sorted(STEP_PLACEHOLDERS | {"cause", "output", "reading", "config_error"}))
UNRENDERED = re.compile(r"\{(?:" + PLACEHOLDER_NAMES + r")(?::[^{}\n]*)?\}")
# a plan step's template (as -v prints a result) keeps its placeholders: memory replays it with the next incident's values
STEP_TEMPLATE = re.compile(r'"?template"?\s*:\s*(?:"[^"\n]*"|[^\n]*)')


# What the scenarios run with unless a test sets it (its -e comes later and wins). A fault a test injects again seconds after a heal is a new incident
# of its story, not that heal's relapse (a test of relapses sets the window). Each healed service is watched for its
# settle window: a second, not the default three, keeps every repair's watch (the unit's NRestarts, main PID and start
# time, or the pid file's process, compared across it) at a third of its cost in the hundreds of heals here; the
# benchmarks, Molecule, the EDA rulebooks and the user's path run the default.
LAB_DEFAULTS = ("-e", "autoheal_relapse_window=0", "-e", "autoheal_settle_seconds=1")


def run_playbook(playbook: str, *args: str, state_dir: Path, env: dict[str, str] | None = None) -> PlaybookRun:
    env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
               PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **(env or {}))
    command = ["ansible-playbook", playbook, "-i", "inventories/lab", "-e", f"autoheal_state_dir={state_dir}", *LAB_DEFAULTS, *args]
    proc = subprocess.run(command, cwd=ROOT, env=env, capture_output=True, text=True, timeout=600, check=False)
    output = proc.stdout + proc.stderr
    said = STEP_TEMPLATE.sub("", output)
    assert not UNRENDERED.search(said), f"unrendered placeholders reach people: {UNRENDERED.findall(said)}\n{output}"
    return PlaybookRun(rc=proc.returncode, output=output)


def run_on_localhost(playbook_text: str, tmp_path: Path, *args: str) -> PlaybookRun:
    """A playbook of the test's own against this machine (the local connection, the controller's Python unless
    ``args`` say another), with a memory of its own in ``tmp_path``: for what needs no lab."""
    playbook = tmp_path / "play.yml"
    playbook.write_text(playbook_text)
    return run_playbook(str(playbook), "-e", "ansible_connection=local", "-e", "ansible_python_interpreter={{ ansible_playbook_python }}",
                        *args, state_dir=tmp_path / "state")


def episodes(state_dir: Path) -> list[dict[str, Any]]:
    path = state_dir / "memory.sqlite3"
    if not path.exists():
        return []
    conn = sqlite3.connect(path)
    conn.row_factory = sqlite3.Row
    rows = [dict(row) for row in conn.execute("SELECT * FROM episodes ORDER BY id")]
    conn.close()
    for row in rows:
        for key in ("plan_json", "verdicts_json", "results_json", "evidence_json"):
            row[key.removesuffix("_json")] = json.loads(row[key]) if row[key] else None
    return rows


def evidence_read(state_dir: Path, host: str) -> list[list[str]]:
    """The read-only evidence commands each episode of the host read, in order: in the check's module call over the
    play's connection (with the executor on the host, in its check request), or each a request of its own when read later."""
    return [result["argv"] for episode in episodes(state_dir) if episode["host"] == host
            for result in ((episode["results"] or {}).get("evidence") or {}).values()]


def acted(state_dir: Path, host: str) -> list[tuple[str, list[str]]]:
    """What ansible-runner ran on the host besides reading evidence: remediation steps, the think loop's reads."""
    return [(purpose, argv) for purpose, argv in commands_run(state_dir, host) if purpose != "evidence"]


def commands_run(state_dir: Path, host: str) -> list[tuple[str, list[str]]]:
    """Every (purpose, argv) ansible-runner executed on the host, read back from the kept artifacts (a run that other
    hosts' remediations shared is kept under the first host's name)."""
    ran = []
    for run_dir in sorted(state_dir.glob("runs/*/*"), key=lambda path: path.name):
        purpose = run_dir.name.split("-")[1]
        # ansible-runner names each event file COUNTER-UUID.json: in the order the events happened
        events = sorted((run_dir / "artifacts" / "run" / "job_events").glob("*.json"), key=lambda path: int(path.name.split("-")[0]))
        for event_file in events:
            event = json.loads(event_file.read_text())
            data = event.get("event_data") or {}
            if event.get("event") in ("runner_on_ok", "runner_on_failed") and data.get("host") == host and data.get("task", "").startswith("step "):
                res = data["res"]
                if "cmd" not in res:  # a restore of a last known good file without the executor: the module's task
                    given = res["invocation"]["module_args"]
                    ran.append((purpose, ["sentinel-heal-restore", given["path"], given["sha256"]]))
                    continue
                argv = res["cmd"]
                argv = argv[4:] if argv[:2] == ["timeout", "--kill-after"] else argv  # the runner's own wrapper
                if argv == ["sudo", "-n", EXECUTOR_PATH]:  # a request to the executor on the host: the step it asked for
                    request = json.loads(res["invocation"]["module_args"]["stdin"])
                    argv = request["plan"][request["step"]]
                ran.append((purpose, argv))
    return ran


# node1 and node2 boot systemd, as production hosts do; node3 stays sysv (tini and init scripts), as containers and
# minimal images without systemd do, so that every run of the tests sees both service managers.
SYSV_HOSTS = {"node3": "sysv"}
# node1 and node2 boot Debian 12 (bookworm) and node3 Debian 13 (trixie), so that every run of the tests sees both
# releases (PostgreSQL 15 and 17, redis 7 and 8); test_releases_lab boots node2 on trixie too for its module.
# inventories/lab reads each host's release from the fleet's state, so any fleet's hosts are declared as they booted.
SESSION_FLEET: dict[str, dict[str, str]] = {"inits": SYSV_HOSTS, "suites": {"node3": "trixie"}}


def postgresql_version(lab: Any, host: str) -> str:
    """The PostgreSQL cluster's version on the host, as its release's package made it (15 on bookworm, 17 on trixie)."""
    [version] = sh(lab, host, "ls", "/etc/postgresql").split()
    return version


# What redis says of a directive it does not know, in its own words, by its major version: redis 7 (bookworm) refuses
# it when it reads the file, redis 8 (trixie) when it applies the configuration
REDIS_REFUSES_DIRECTIVE = {"7": "Bad directive or wrong number of arguments", "8": "Unresolved Configuration(s) Detected"}


def redis_refuses_directive(lab: Any, host: str) -> str:
    """redis's words for an unknown directive, as the redis on the host says them."""
    version = re.search(r"v=(\d+)\.", sh(lab, host, "redis-server", "--version"))
    assert version, f"{host}: redis-server --version names no version"
    return REDIS_REFUSES_DIRECTIVE[version.group(1)]


@pytest.fixture(scope="session")
def lab() -> Iterator[Any]:
    if os.geteuid() != 0:
        pytest.fail("the lab fleet needs root (network namespaces, mounts): run the tests as root")
    with fleet.fresh(**SESSION_FLEET):  # a fleet left running (by hand, by an interrupted run) may carry faults
        yield fleet


def pytest_collection_modifyitems(items: list[pytest.Item]) -> None:
    """The tests that boot a fleet of their own (marked own_fleet) run after every test on the session's fleet, each
    module's in file order: the session's fleet is booted once, never again after each of them."""
    items.sort(key=lambda item: item.get_closest_marker("own_fleet") is not None)


_session_fleet_replaced = False


@pytest.fixture(autouse=True)
def _session_fleet(request: pytest.FixtureRequest) -> Iterator[None]:
    """A test marked own_fleet leaves the fleet it booted (or took down) behind; a test on the session's fleet that
    comes after one (chosen tests run in another order) boots the session's fleet again first. A test on the session's
    fleet that takes it down fails, naming itself, and the fleet is booted again: else every test after it fails on a
    fleet that is not there."""
    global _session_fleet_replaced  # pylint: disable=global-statement
    own_fleet = request.node.get_closest_marker("own_fleet") is not None
    if own_fleet:
        _session_fleet_replaced = True
    elif _session_fleet_replaced and "lab" in request.fixturenames:
        request.getfixturevalue("lab").up(**SESSION_FLEET)
        _session_fleet_replaced = False
    yield
    if not own_fleet and "lab" in request.fixturenames:
        lab = request.getfixturevalue("lab")
        lost = sorted(set(lab.host_names()) - set(lab.running()))
        if lost:
            lab.up(**SESSION_FLEET)
            pytest.fail(f"{request.node.nodeid} left the session's fleet without {', '.join(lost)}: a test that boots or takes down "
                        "fleets of its own is marked own_fleet", pytrace=False)


@pytest.fixture
def bridged_postgres(lab: Any) -> Iterator[PostgresServer]:
    """PostgreSQL on the controller, reached from containers (jobs in the execution environment, execution nodes) over
    podman's network and the lab bridge's address: its URL for them is ``bridged_url``."""
    server = bridged_server()
    try:
        yield server.up()
    finally:
        server.down()


class Faults:
    def __init__(self, lab: Any) -> None:
        self.lab = lab
        self.injected: list[tuple[str, str, tuple[str, ...]]] = []

    def inject(self, host: str, fault: str, *arguments: str) -> None:
        """``arguments``: what a fault of a class breaks (its service, port, ...), as fleet.inject takes them."""
        self.injected.append((host, fault, arguments))
        self.lab.inject(host, fault, *arguments)

    def undo_all(self) -> None:
        for host, fault, arguments in reversed(self.injected):
            self.lab.undo(host, fault, *arguments)


# where each host keeps the last known good configuration of its services (plugins/module_utils/_host/known_good.py)
KNOWN_GOOD_DIR = "/var/lib/sentinel-heal/known-good"


@pytest.fixture
def faults(lab: Any) -> Iterator[Faults]:
    # each test starts with no last known good on the hosts, as it starts with a memory of its own: a copy an earlier
    # test's healthy check kept would turn its configuration fault into a restore
    for name in lab.HOSTS:
        lab.run_in(name, ["rm", "-rf", KNOWN_GOOD_DIR], timeout=30)
    injected = Faults(lab)
    yield injected
    injected.undo_all()


class RollOut:
    """A test's own policy or services rolled out to the lab's executors (node1, node2) as an operator rolls them out:
    sentinel.heal.host applied again with the variables the heal gets (``--tags host_policy``: those files alone). The
    executors refuse every step judged under another policy version (test_host_executor_lab shows it), so a test that
    judges with a policy of its own rolls it out first; the lab's own is applied again after the test."""

    def __init__(self, state_dir: Path) -> None:
        self.state_dir = state_dir
        self.hosts: set[str] = set()

    def __call__(self, *extra_vars: str, hosts: str = "executor") -> None:
        self._apply(hosts, *extra_vars)
        self.hosts.add(hosts)

    def undo(self) -> None:
        """The lab's own policy and services back on the hosts rolled out to (by the fixture, or by a test midway)."""
        if self.hosts:
            self._apply(",".join(sorted(self.hosts)))
            self.hosts.clear()

    def _apply(self, hosts: str, *extra_vars: str) -> None:
        run = run_playbook("playbooks/host.yml", "-e", "autoheal_target=executor", *fleet.AS_ADMIN, "--limit", hosts, "--tags", "host_policy",
                           *extra_vars, state_dir=self.state_dir)
        assert run.rc == 0, run.output


@pytest.fixture
def roll_out(lab: Any, tmp_path_factory: pytest.TempPathFactory) -> Iterator[RollOut]:
    rolled = RollOut(tmp_path_factory.mktemp("roll-out"))
    try:
        yield rolled
    finally:
        rolled.undo()


# A plan that takes its time: a first step that waits, then the real fix; the policy allows exactly these.
SLOW_RUNBOOK = ("---\nid: slow-start\ntitle: start nginx after a pause\nservices: [nginx]\nmatch: {failure_class: [not_running]}\n"
                "steps:\n  - sleep SECONDS\n  - service {init_service} start\npriority: 1000\n---\n")
SLOW_POLICY = """version: 1
rules:
  - {id: nginx-config-test, executable: nginx, argv: [-t], decision: allow, become: true}
  - {id: pause, executable: sleep, argv: ["SECONDS"], decision: allow}
  - {id: start-nginx, executable: systemctl, argv: [start, nginx], decision: allow, become: true}
"""


def slow_plan(tmp_path: Path, seconds: int) -> list[str]:
    """The options of heal.yml that make nginx's plan pause ``seconds`` before it starts nginx (roll them out to the
    lab's executors first: they carry a policy of their own)."""
    runbooks = tmp_path / "runbooks"
    runbooks.mkdir(exist_ok=True)
    (runbooks / "slow.md").write_text(SLOW_RUNBOOK.replace("SECONDS", str(seconds)))
    policy = tmp_path / "slow-policy.yml"
    policy.write_text(SLOW_POLICY.replace("SECONDS", str(seconds)))
    return ["-e", json.dumps({"autoheal_runbooks": [str(runbooks)], "autoheal_policy_file": str(policy), "autoheal_builtin_runbooks": False})]


def wait_for(condition: Any, seconds: float) -> bool:
    deadline = time.monotonic() + seconds
    while time.monotonic() < deadline:
        if condition():
            return True
        time.sleep(0.5)
    return False


def sh(lab: Any, host: str, *argv: str) -> str:
    """Run a command on a lab host, outside Ansible; returns stdout and stderr."""
    proc = lab.run_in(host, list(argv), timeout=30)
    return f"{proc.stdout}{proc.stderr}"
