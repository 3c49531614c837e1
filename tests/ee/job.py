"""A job in the execution environment, as AWX starts one: ansible-runner with process isolation (podman and the image),
a private data directory holding the project (a playbook importing the collection's), the inventory and the extra
variables, and files the inventory names by their path in the container (/runner/...), such as the SSH key. Needs
tests/lab on the import path (for the lab's inventory and keys), as the tests and benchmarks that use it put it.

The image runs jobs as uid 1000 (ansible-builder's `USER 1000`) with root's group added; ansible-runner, run as root
here, would make the private data directory and the job's artifact directory root's alone (0700), where the job's
user can neither read its project nor write its events. AWX's execution nodes run podman as the account that owns
those directories; here the directories are given to the image's user before the run instead. For the same reason the
SSH key is a file of the private data directory, not ansible-runner's ssh_key, which it writes as root's alone.
"""

from __future__ import annotations

import json
import os
import shutil
import uuid
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import ansible_runner
import fleet
import yaml

# ansible-builder's final stage: `USER 1000`
IMAGE_UID = 1000
# where the jobs find the memory's directory inside the container (a volume of the host's)
STATE_IN_CONTAINER = "/var/lib/sentinel-heal"


@dataclass
class Job:
    private_data_dir: Path
    ident: str
    rc: int
    status: str
    stdout: str

    @property
    def artifacts(self) -> Path:
        return self.private_data_dir / "artifacts" / self.ident

    def events(self) -> list[dict[str, Any]]:
        """The job's events, in their order, as its artifacts keep them."""
        files = sorted((self.artifacts / "job_events").glob("*.json"), key=lambda path: int(path.name.split("-")[0]))
        return [json.loads(path.read_text(encoding="utf-8")) for path in files]

    def stats(self) -> dict[str, Any]:
        """The play's recap, with what the job gave ``set_stats`` (``artifact_data``: AWX's artifacts of the job)."""
        [event] = [event for event in self.events() if event["event"] == "playbook_on_stats"]
        return dict(event["event_data"])


def give_to_image_user(path: Path) -> None:
    """Owned by the image's user, group root, as the job in the container reads and writes it."""
    for root, dirs, files in os.walk(path):
        for name in (root, *(os.path.join(root, entry) for entry in dirs + files)):
            os.chown(name, IMAGE_UID, 0, follow_symlinks=False)


def copy_lab_keys(directory: Path) -> None:
    """The lab's keys (the machine credential's SSH key, the approver's signing key) in ``directory``, at the paths they
    have in this checkout, which fleet.copy_inventory's copies name."""
    for key in (fleet.SSH_KEY, fleet.APPROVER_KEY, fleet.APPROVER_KEY.with_suffix(".pub")):
        copy = directory / key.relative_to(fleet.COLLECTION_ROOT)
        copy.parent.mkdir(parents=True, exist_ok=True)
        shutil.copy(key, copy)
        copy.chmod(0o600)


def lab_inventory(directory: Path, mounted_at: str = "/runner") -> Path:
    """inventories/lab as a job's inventory, ``directory``/inventory (ansible-runner's default), with the lab's keys in
    ``directory`` (a job's private data directory, or a volume), named by their paths where the container sees the
    directory, ``mounted_at``."""
    copy_lab_keys(directory)
    return fleet.copy_inventory(directory / "inventory", checkout=mounted_at)


def prepare_job(private_data_dir: Path, playbook: str, *, extravars: dict[str, Any]) -> tuple[str, str]:
    """The project (a playbook importing the collection's ``playbook``, a FQCN such as sentinel.heal.heal) and the extra
    variables in the private data directory, and the job's artifact directory made: the project's playbook and the
    job's ident. Written here, not handed to ansible-runner, which would write them as root's alone."""
    project = private_data_dir / "project"
    project.mkdir(parents=True, exist_ok=True)
    job_playbook = f"{playbook.rsplit('.', 1)[-1]}.yml"
    (project / job_playbook).write_text(f"---\n- name: The collection's playbook\n  ansible.builtin.import_playbook: {playbook}\n", encoding="utf-8")
    (private_data_dir / "env").mkdir(exist_ok=True)
    (private_data_dir / "env" / "extravars").write_text(yaml.safe_dump(extravars), encoding="utf-8")
    ident = uuid.uuid4().hex
    (private_data_dir / "artifacts" / ident / "job_events").mkdir(parents=True)
    return job_playbook, ident


def run_job(private_data_dir: Path, playbook: str, image: str | None, *, extravars: dict[str, Any], volumes: tuple[str, ...] = (),
            envvars: dict[str, str] | None = None, timeout: int = 600) -> Job:
    """Run the collection's playbook in the image, against the inventory of the private data directory (lab_inventory);
    the job's view of the host's files is that directory (at /runner) and the volumes ("HOST:CONTAINER:OPTIONS").
    Without an image, the same job runs on this machine (the collection from ANSIBLE_COLLECTIONS_PATH or ansible.cfg),
    for comparison."""
    job_playbook, ident = prepare_job(private_data_dir, playbook, extravars=extravars)
    isolation: dict[str, Any] = {}
    if image is not None:
        give_to_image_user(private_data_dir)
        isolation = {"process_isolation": True, "process_isolation_executable": "podman", "container_image": image,
                     "container_volume_mounts": list(volumes)}
    result = ansible_runner.run(private_data_dir=str(private_data_dir), ident=ident, playbook=job_playbook, envvars=envvars or {},
                                timeout=timeout, quiet=True, **isolation)
    stdout = (Path(result.config.artifact_dir) / "stdout").read_text(encoding="utf-8", errors="replace")
    return Job(private_data_dir, ident, int(result.rc), str(result.status), stdout)
