"""The user's path, as the guides command_line.rst and role.rst (docs/docsite/rst/) write it, run as written on the lab
fleet; and command_line.rst's host that heals itself (``ansible_connection: local``), on a lab host with no internet.

A new HOME, a fresh virtualenv, the collection built from a clone and installed from its tarball, a project
directory of the user's own outside the checkout, with none of the checkout's ansible.cfg, environment or
.collections link: what a person who follows the guides gets. The guides' `bash` blocks run as written (only the clone
URL points at this checkout); a block whose first line is `# ~/PATH` is a file the guide shows, written there.
"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path
from typing import Any

import host_wheels  # tests/lab, on the path conftest gives
from conftest import ROOT, Faults, one_line, sh
from guides import CodeBlock, code_block
from readme_figures import about, stated

CLONE_URL = "https://github.com/sentinel-heal/sentinel.heal.git"
FILE_HEADER = re.compile(r"#\s*(?P<path>~/\S+)\n")
# What a reader's shell carries from one block to the next: the virtualenv once made, the project once entered.
CARRIED = ("[ -f ~/.venvs/sentinel-heal/bin/activate ] && . ~/.venvs/sentinel-heal/bin/activate\n"
           "cd ~/ops 2>/dev/null || cd ~\n")
# What the tarball must not carry: the lab, the tests that need it, benchmarks, caches, the checkout's own settings.
NOT_SHIPPED = ("tests/lab/", "tests/ee/", "tests/integration/", "bench/", "inventories/lab/", "__pycache__", ".pyc", "ansible.cfg", "Makefile")


def shown_file(block: CodeBlock) -> str | None:
    """The file a block shows (its first line `# ~/PATH`), or None for commands."""
    header = FILE_HEADER.match(block.body)
    return header["path"] if header else None


class Reader:
    """A person at a shell with a home of their own, following the guides."""

    def __init__(self, home: Path) -> None:
        self.home = home
        home.mkdir()
        keep = {key: value for key, value in os.environ.items()
                if not key.startswith(("ANSIBLE_", "SENTINEL_", "VIRTUAL_ENV", "PYTHON", "PIP_"))}
        # the interpreter this machine has, never this checkout's .venv; pip's download cache is shared to save time
        self.env = dict(keep, HOME=str(home), PATH=f"{Path(sys.base_prefix) / 'bin'}{os.pathsep}/usr/local/bin:/usr/bin:/bin",
                        PIP_CACHE_DIR=str(Path.home() / ".cache" / "pip"), PIP_DISABLE_PIP_VERSION_CHECK="1", ANSIBLE_NOCOLOR="1")

    def follow(self, block: CodeBlock, timeout: int = 600) -> str:
        file = shown_file(block)
        if file is not None:
            path = self.home / file.removeprefix("~/")
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(block.body)
            return ""
        assert block.language == "bash", f"a block the test does not know how to follow: {block.language}"
        script = CARRIED + block.body.replace(CLONE_URL, str(ROOT))
        proc = subprocess.run(["bash", "-euo", "pipefail", "-c", script], env=self.env, cwd=self.home, capture_output=True,
                              text=True, timeout=timeout, check=False)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"{block.body}\nrc={proc.returncode}\n{output}"
        return output


class ReaderOnHost:
    """The same person at a shell on a lab host, over SSH as the lab's user (sudo without a password, as the guide
    asks), in that user's home."""

    def __init__(self, lab: Any, host: str) -> None:
        self.ssh = ["ssh", "-i", str(lab.SSH_KEY), "-o", "StrictHostKeyChecking=no", "-o", "UserKnownHostsFile=/dev/null", "-o", "BatchMode=yes",
                    "-o", "LogLevel=ERROR"]
        self.login = f"sentinel@{lab.address(host)}"

    def carry(self, *paths: Path) -> None:
        """Directories of this machine copied into the home on the host, as a person copies them there."""
        subprocess.run(["scp", "-q", "-r", *self.ssh[1:], *map(str, paths), f"{self.login}:"], check=True, timeout=300, capture_output=True)

    def run(self, script: str, timeout: int = 600) -> subprocess.CompletedProcess[str]:
        return subprocess.run([*self.ssh, self.login, "bash", "-euo", "pipefail", "-s"], input=script, capture_output=True, text=True,
                              timeout=timeout, check=False)

    def follow(self, block: CodeBlock) -> str:
        file = shown_file(block)
        if file is not None:
            script = f"mkdir -p \"$(dirname {file})\"\ncat > {file} <<'SENTINEL_HEAL_GUIDE_EOF'\n{block.body}SENTINEL_HEAL_GUIDE_EOF\n"
        else:
            assert block.language == "bash", f"a block the test does not know how to follow: {block.language}"
            script = CARRIED + block.body
        proc = self.run(script)
        output = proc.stdout + proc.stderr
        assert proc.returncode == 0, f"{block.body}\nrc={proc.returncode}\n{output}"
        return output


def lab_inventory(project: Path) -> None:
    """The lab fleet as the user's own inventory: its hosts, with the key where the lab keeps it, and its group_vars."""
    inventory = project / "inventory"
    (inventory / "group_vars").mkdir(parents=True, exist_ok=True)
    hosts = (ROOT / "inventories" / "lab" / "hosts.yml").read_text()
    key = ROOT / "tests" / "lab" / ".state" / "ssh" / "id_ed25519"
    (inventory / "hosts.yml").write_text(re.sub(r'ansible_ssh_private_key_file: .*', f"ansible_ssh_private_key_file: {key}", hosts))
    # where the lab keeps its state (each host's release), from this checkout
    lab_vars = (ROOT / "inventories" / "lab" / "group_vars" / "lab.yml").read_text().replace("{{ inventory_dir }}/../..", str(ROOT))
    (inventory / "group_vars" / "lab.yml").write_text(lab_vars)


def test_a_user_installs_from_the_tarball_and_heals_the_lab_from_a_directory_of_their_own(tmp_path: Path, lab: Any,
                                                                                          faults: Faults) -> None:
    reader = Reader(tmp_path / "home")
    install, settings, services, dry_and_real, waiting_knowledge_memory = (
        code_block("command_line", name) for name in ("install", "ansible_cfg", "services", "run", "approve_knowledge_memory"))

    installed = reader.follow(install)
    tarballs = list((reader.home / "src" / "dist").glob("sentinel-heal-*.tar.gz"))
    assert len(tarballs) == 1, installed
    with tarfile.open(tarballs[0]) as tarball:
        shipped = tarball.getnames()
    assert not [name for name in shipped if any(part in name for part in NOT_SHIPPED)]
    assert {"MANIFEST.json", "requirements.txt", "requirements-model.txt", "docs/docsite/rst/command_line.rst",
            "docs/docsite/extra-docs.yml", "docs/docsite/links.yml"} <= set(shipped)
    print(f"collection tarball: {tarballs[0].stat().st_size} bytes, {len(shipped)} entries")
    # the virtualenv the guide made (requirements.txt and the model) is as large as the README says
    venv_mb = sum(path.lstat().st_size for path in (reader.home / ".venvs" / "sentinel-heal").rglob("*")) / 1e6
    assert about(venv_mb, stated("virtualenv")), f"the virtualenv is {venv_mb:.0f} MB, README.md says about {stated('virtualenv')} MB"
    assert (reader.home / ".ansible" / "collections" / "ansible_collections" / "sentinel" / "heal" / "MANIFEST.json").is_file()

    reader.follow(settings)
    reader.follow(services)
    lab_inventory(reader.home / "ops")

    faults.inject("node1", "nginx-killed")
    ran = reader.follow(dry_and_real)
    dry, real = ran.split("PLAY RECAP", 1)[0], ran
    assert "node1: nginx would be planned (check mode)" in " ".join(dry.split()), ran
    assert "node1: nginx healed in 1 attempt" in " ".join(real.split()), ran
    assert "SENTINEL.HEAL TIMELINE" in ran  # the callback the guide's ansible.cfg enables
    assert "200" in sh(lab, "node1", "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/")
    assert (reader.home / ".local" / "state" / "sentinel-heal" / "memory.sqlite3").is_file()

    answered = " ".join(reader.follow(waiting_knowledge_memory).split())
    assert "no plan waits for approval" in answered, answered
    assert "port-conflict" in answered, answered  # the knowledge base answered, with the offline model the guide installed
    assert "'outcome': 'healed'" in answered or '"outcome": "healed"' in answered, answered
    assert "WARNING" not in answered, answered

    site, role_commands = code_block("role", "site"), code_block("role", "commands")
    reader.follow(site)
    used = " ".join(reader.follow(role_commands).split())
    assert re.search(r"node1 : ok=\d+ changed=0 unreachable=0 failed=0", used), used
    assert "autoheal_services" in used and "autoheal_max_attempts" in used


def test_a_host_with_no_internet_heals_its_own_nginx_and_redis_over_the_local_connection(tmp_path: Path, lab: Any, faults: Faults) -> None:
    host = "node3"  # sysv: nginx and redis started by their init scripts
    python = sh(lab, host, "python3", "-c", "import sys; print(*sys.version_info[:2], sep='.')").strip()
    carried = tmp_path / "carried"
    shutil.copytree(host_wheels.ensure(python), carried / "wheels")
    subprocess.run(["ansible-galaxy", "collection", "build", str(ROOT), "--output-path", str(carried / "dist")], check=True, timeout=300,
                   capture_output=True, env=dict(os.environ, ANSIBLE_NOCOLOR="1"))
    reader = ReaderOnHost(lab, host)
    assert reader.run("curl -s -m 5 -o /dev/null https://pypi.org/ || echo no internet").stdout.strip() == "no internet"
    reader.carry(carried / "wheels", carried / "dist")
    try:
        reader.follow(code_block("command_line", "local_install"))
        for name in ("ansible_cfg", "local_inventory", "local_services"):
            reader.follow(code_block("command_line", name))

        faults.inject(host, "nginx-killed")
        faults.inject(host, "redis-killed")
        ran = one_line(reader.follow(code_block("command_line", "local_run")))
        assert "localhost: nginx healed in 1 attempt" in ran, ran
        assert "localhost: redis healed in 1 attempt" in ran, ran
        assert re.search(r"localhost : ok=\d+ changed=\d+ unreachable=0 failed=0", ran), ran
        assert "WARNING" not in ran, ran
        # the memory where the guide says, in the home of the user who ran the play
        assert reader.run("test -f ~/.local/state/sentinel-heal/memory.sqlite3").returncode == 0
        assert "200" in sh(lab, host, "curl", "-s", "-o", "/dev/null", "-w", "%{http_code}", "http://127.0.0.1/")
        assert "PONG" in sh(lab, host, "redis-cli", "ping")
    finally:
        reader.run("rm -rf ~/.venvs ~/ops ~/wheels ~/dist ~/.ansible/collections ~/.local/state/sentinel-heal")
