"""A job as AWX ships it to an execution node: ansible-runner's streaming interface, run as AWX runs it.

On the control node, ``transmit`` packs the private data directory (project, inventory, extra variables, the keys the
inventory names) and the job's settings (playbook, ident, limit, environment) into one stream; on the execution node,
``ansible-runner worker`` unpacks that stream, runs the job, and streams back its status, every event and, at the end,
its artifact directory; on the control node again, ``process`` turns that stream into the job's artifacts (rc, status,
stdout, job_events and whatever the job wrote into its artifact directory), which is what AWX's job page shows. Here
an execution node is a container of the image running the worker, as a container group's pod runs it (a job's files
at /runner, as for a job with process isolation, tests/ee/job.py); each node has a name of its own, which is also the
container's host name, so that two nodes are two machines to the job. Needs tests/lab on the import path, as job.py.
"""

from __future__ import annotations

import subprocess
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any

import ansible_runner
from job import Job, prepare_job

# where the worker unpacks a job inside the node (the image's working directory, writable by its user)
WORKER_DIR = "/runner"


@dataclass(frozen=True)
class ExecutionNode:
    """A node of an instance group: ``name`` is the container's name and host name; ``volumes`` what it mounts
    ("HOST:CONTAINER:OPTIONS"), as a node's persistent volume."""

    name: str
    image: str
    volumes: tuple[str, ...] = ()

    def worker(self, stream_in: IO[bytes], stream_out: IO[bytes], log: IO[bytes]) -> subprocess.Popen[bytes]:
        # the host's network, as a node (a machine) reaches the managed hosts directly: podman's bridge is set up and torn
        # down as containers start and stop (netavark), and nodes here start and stop together
        command = ["podman", "run", "--rm", "-i", "--network", "host", "--name", self.name, "--hostname", self.name,
                   *(f"--volume={volume}" for volume in self.volumes), self.image,
                   "ansible-runner", "worker", "--private-data-dir", WORKER_DIR]
        return subprocess.Popen(command, stdin=stream_in, stdout=stream_out, stderr=log)

    def kill(self) -> None:
        """The node lost, as a node whose machine dies: its container killed, the job in it with it."""
        subprocess.run(["podman", "kill", self.name], check=False, capture_output=True)


class StreamedJob:
    """One job shipped to one node: ``start`` transmits it and starts the node's worker, ``wait`` processes what came
    back into the private data directory's artifacts (artifacts/IDENT), as the control node keeps them."""

    def __init__(self, private_data_dir: Path, playbook: str, node: ExecutionNode, *, extravars: dict[str, Any],
                 envvars: dict[str, str] | None = None, limit: str | None = None) -> None:
        self.private_data_dir, self.node = private_data_dir, node
        job_playbook, self.ident = prepare_job(private_data_dir, playbook, extravars=extravars)
        self._sent = private_data_dir.parent / f"{private_data_dir.name}.transmitted"
        self._returned = private_data_dir.parent / f"{private_data_dir.name}.returned"
        self._worker_log = private_data_dir.parent / f"{private_data_dir.name}.worker.log"
        settings: dict[str, Any] = {"envvars": dict(envvars or {}), **({"limit": limit} if limit else {})}
        with self._sent.open("wb") as sent:
            ansible_runner.run(private_data_dir=str(private_data_dir), ident=self.ident, playbook=job_playbook, streamer="transmit",
                               _output=sent, quiet=True, **settings)
        self._worker: subprocess.Popen[bytes] | None = None

    @property
    def artifact_dir_on_the_node(self) -> str:
        """The job's artifact directory as the job sees it on the node: what the job writes there comes back."""
        return f"{WORKER_DIR}/artifacts/{self.ident}"

    def start(self) -> StreamedJob:
        with self._sent.open("rb") as sent, self._returned.open("wb") as returned, self._worker_log.open("wb") as log:
            self._worker = self.node.worker(sent, returned, log)
        return self

    def wait(self, timeout: float = 600) -> Job:
        assert self._worker is not None, "start the job first"
        try:
            self._worker.wait(timeout=timeout)
        except subprocess.TimeoutExpired:
            self.node.kill()
            self._worker.wait()
        with self._returned.open("rb") as returned:
            result = ansible_runner.run(private_data_dir=str(self.private_data_dir), ident=self.ident, streamer="process",
                                        _input=returned, quiet=True)
        # the artifacts the worker sent back, as the control node keeps them (a stream cut short leaves some out)
        artifacts = self.private_data_dir / "artifacts" / self.ident
        rc, stdout = artifacts / "rc", artifacts / "stdout"
        return Job(self.private_data_dir, self.ident, int(rc.read_text()) if rc.exists() else -1, str(result.status),
                   stdout.read_text(encoding="utf-8", errors="replace") if stdout.exists() else "")

    def worker_said(self) -> str:
        """What the node's worker printed on its stderr (podman's and ansible-runner's own complaints)."""
        return self._worker_log.read_text(encoding="utf-8", errors="replace") if self._worker_log.exists() else ""


def stream_job(private_data_dir: Path, playbook: str, node: ExecutionNode, *, extravars: dict[str, Any],
               envvars: dict[str, str] | None = None, limit: str | None = None, timeout: float = 600) -> Job:
    """The job shipped to the node and run there to its end: its artifacts on the control node."""
    return StreamedJob(private_data_dir, playbook, node, extravars=extravars, envvars=envvars, limit=limit).start().wait(timeout)
