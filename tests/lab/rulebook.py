"""ansible-rulebook against the lab fleet, for the EDA tests and benchmark: an inventory it can copy, a rulebook run in
the background with its output in a file, a clean stop.

ansible-rulebook copies the inventory into each job's private data directory, so the lab inventory's
``{{ inventory_dir }}/../..`` (the checkout, where the lab's ssh key is) would point elsewhere there: the inventory
written here names the key by its absolute path, and sets the state dir of the heal jobs.
"""

from __future__ import annotations

import json
import os
import re
import signal
import subprocess
import sys
import time
import urllib.error
import urllib.request
from pathlib import Path
from types import TracebackType
from typing import Any

import fleet

ROOT = Path(__file__).resolve().parents[2]
# how a job of a rulebook shows in its output: one play of heal.yml per heal
HEAL_PLAY = re.compile(r"^PLAY \[Heal the declared services\]", re.M)


def eda_inventory(directory: Path, state_dir: Path, checkout: str = str(fleet.COLLECTION_ROOT), **variables: Any) -> Path:
    """The lab inventory in ``directory``, copyable (the key by absolute path, from ``checkout``: see
    fleet.copy_inventory), with the heal jobs' state dir (and ``variables`` for every host)."""
    fleet.copy_inventory(directory, checkout)
    settings = {"autoheal_state_dir": str(state_dir), **variables}
    (directory / "group_vars" / "all.yml").write_text("---\n" + "".join(f"{name}: {json.dumps(value)}\n" for name, value in settings.items()))
    return directory


class Rulebook:
    """ansible-rulebook (``command``) in the background, its output in ``log``; ready once ``ready`` shows."""

    def __init__(self, command: list[str], env: dict[str, str], log: Path, ready: str, cwd: Path = ROOT) -> None:
        self.command, self.env, self.log, self.ready, self.cwd = command, env, log, ready, cwd
        self.process: subprocess.Popen[bytes] | None = None

    @classmethod
    def of(cls, name: str, inventory: Path, log: Path, ready: str, variables: dict[str, str] | None = None,
           vars_file: Path | None = None) -> Rulebook:
        """The collection's rulebook NAME from this checkout, its source reading ``inventory``; ``vars_file``: its --vars."""
        variables = {"SENTINEL_HEAL_INVENTORY": str(inventory), **(variables or {})}
        command = [str(Path(sys.executable).with_name("ansible-rulebook")), "-r", f"sentinel.heal.{name}", "-i", str(inventory),
                   "-E", ",".join(variables), *(["--vars", str(vars_file)] if vars_file else []), "-v"]
        env = dict(os.environ, ANSIBLE_CONFIG=str(ROOT / "ansible.cfg"), ANSIBLE_NOCOLOR="1", ANSIBLE_FORCE_COLOR="0",
                   PATH=f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}", **variables)
        return cls(command, env, log, ready)

    def __enter__(self) -> Rulebook:
        with self.log.open("wb") as out:
            # a session of its own: the stop reaches ansible-rulebook, and anything it left running is found by its group
            self.process = subprocess.Popen(self.command, cwd=self.cwd, env=self.env, stdout=out, stderr=subprocess.STDOUT, start_new_session=True)
        try:
            self.wait_for(re.escape(self.ready), timeout=90)
        except BaseException:
            self.stop()  # __exit__ is not called when __enter__ fails: a rulebook that never got ready is stopped here
            raise
        return self

    def __exit__(self, kind: type[BaseException] | None, error: BaseException | None, trace: TracebackType | None) -> None:
        self.stop()

    def output(self) -> str:
        return self.log.read_text(errors="replace")

    def heals(self) -> int:
        return len(HEAL_PLAY.findall(self.output()))

    def wait_for(self, pattern: str, timeout: float, count: int = 1) -> None:
        deadline = time.monotonic() + timeout
        while len(re.findall(pattern, self.output(), re.M)) < count:
            assert self.process is not None
            if self.process.poll() is not None:
                raise AssertionError(f"ansible-rulebook ended (rc {self.process.returncode}) before {pattern!r}:\n{self.output()[-6000:]}")
            if time.monotonic() > deadline:
                raise AssertionError(f"no {pattern!r} within {timeout:g} s:\n{self.output()[-6000:]}")
            time.sleep(0.1)

    def stop(self, timeout: float = 30.0) -> int | None:
        """Stop as a person does (SIGINT, Ctrl-C); returns the exit status, or None when it had to be killed."""
        if self.process is None or self.process.poll() is not None:
            return None if self.process is None else self.process.returncode
        self.process.send_signal(signal.SIGINT)
        try:
            return self.process.wait(timeout)
        except subprocess.TimeoutExpired:
            os.killpg(self.process.pid, signal.SIGKILL)
            self.process.wait()
            return None

    def leftovers(self, grace: float = 5.0) -> list[str]:
        """Processes of the rulebook's session still alive (not zombies) ``grace`` seconds after it ended: an ansible run
        its source did not stop."""
        assert self.process is not None
        deadline = time.monotonic() + grace
        while True:
            proc = subprocess.run(["ps", "-o", "pid=,stat=,args=", "-s", str(self.process.pid)], capture_output=True, text=True, check=False)
            alive = [line.strip() for line in proc.stdout.splitlines() if line.split() and not line.split()[1].startswith("Z")]
            if not alive or time.monotonic() > deadline:
                return alive
            time.sleep(0.2)


def post_json(url: str, payload: Any, timeout: float = 10.0) -> tuple[int, Any]:
    return post_body(url, json.dumps(payload).encode(), timeout)


def post_body(url: str, body: bytes, timeout: float = 10.0) -> tuple[int, Any]:
    """POST a body as JSON's content type (whatever it holds); the status and the JSON answer."""
    request = urllib.request.Request(url, data=body, headers={"Content-Type": "application/json"}, method="POST")
    try:
        with urllib.request.urlopen(request, timeout=timeout) as response:
            return response.status, json.loads(response.read())
    except urllib.error.HTTPError as error:
        return error.code, json.loads(error.read() or b"null")


def answers(url: str, timeout: float = 2.0) -> bool:
    """The URL answers HTTP 200 (nginx on a lab host is healthy)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout) as response:
            return bool(response.status == 200)
    except (OSError, urllib.error.URLError):
        return False


def alertmanager_payload(host: str, service: str, alertname: str = "ServiceDown", **labels: str) -> dict[str, Any]:
    """A webhook body as Alertmanager (webhook_configs) sends it, one firing alert."""
    return alertmanager_body({"alertname": alertname, "host": host, "service": service, "severity": "critical", **labels},
                             summary=f"{service} is down on {host}")


def systemd_unit_alert(instance: str, unit: str) -> dict[str, Any]:
    """Alertmanager's body for an alert on node_exporter's systemd collector, which names the unit, not the service:
    ``node_systemd_unit_state{name="UNIT", state="failed"} == 1`` on the target ``instance`` (HOST:9100)."""
    return alertmanager_body({"alertname": "SystemdUnitFailed", "instance": instance, "job": "node", "name": unit, "state": "failed",
                              "type": "notify", "severity": "critical"}, summary=f"{unit} failed on {instance}")


def alertmanager_body(labels: dict[str, str], summary: str) -> dict[str, Any]:
    alertname = labels["alertname"]
    return {"version": "4", "groupKey": "{}:{alertname=" + json.dumps(alertname) + "}", "status": "firing", "receiver": "sentinel-heal",
            "groupLabels": {"alertname": alertname}, "commonLabels": labels, "commonAnnotations": {},
            "externalURL": "http://alertmanager:9093", "truncatedAlerts": 0,
            "alerts": [{"status": "firing", "labels": labels, "annotations": {"summary": summary},
                        "startsAt": "2026-01-01T00:00:00Z", "endsAt": "0001-01-01T00:00:00Z", "generatorURL": "", "fingerprint": "0"}]}
