"""The user's path, as the guides command_line.rst and role.rst (docs/docsite/rst/) write it, run as written on the lab
fleet.

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

from conftest import ROOT, Faults, sh
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


def lab_inventory(project: Path) -> None:
    """The lab fleet as the user's own inventory: its hosts, with the key where the lab keeps it, and its group_vars."""
    inventory = project / "inventory"
    (inventory / "group_vars").mkdir(parents=True, exist_ok=True)
    hosts = (ROOT / "inventories" / "lab" / "hosts.yml").read_text()
    key = ROOT / "tests" / "lab" / ".state" / "ssh" / "id_ed25519"
    (inventory / "hosts.yml").write_text(re.sub(r'ansible_ssh_private_key_file: .*', f"ansible_ssh_private_key_file: {key}", hosts))
    shutil.copy(ROOT / "inventories" / "lab" / "group_vars" / "lab.yml", inventory / "group_vars" / "lab.yml")


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
