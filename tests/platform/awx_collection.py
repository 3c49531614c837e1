"""The awx.awx collection for checking playbooks/awx_configure.yml, from the community ``ansible`` package on PyPI.

No Galaxy server is reachable here, but the ``ansible`` wheel ships awx.awx inside it. This downloads that wheel once
(pinned by version and hash, without its dependencies), takes ``ansible_collections/awx/awx`` out of it into
``~/.cache/sentinel-heal/collections/ansible-VERSION`` (a collections path of its own), and prints that path:

    python tests/platform/awx_collection.py                       # install if missing, print the collections path
    python tests/platform/awx_collection.py --link .collections   # and link awx.awx into the checkout's path

``--link`` makes ansible-lint and ``ansible-playbook --syntax-check`` in the checkout (ansible.cfg's
``collections_path = .collections``) resolve the awx.awx modules. Nothing is installed into the virtualenv.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import os
import shutil
import subprocess
import sys
import tempfile
import zipfile
from pathlib import Path

ANSIBLE_VERSION = "12.3.0"
ANSIBLE_WHEEL_SHA256 = "cd156f82fa87f7a899212b0efa9f7ca3a24d609212de9f78428a572eb01e5414"
AWX_VERSION = "24.6.1"  # the awx.awx that ansible 12.3.0 ships
MEMBER_PREFIX = "ansible_collections/awx/awx/"
CACHE = Path(os.environ.get("SENTINEL_HEAL_CACHE") or Path.home() / ".cache" / "sentinel-heal")


def collections_path(cache: Path = CACHE) -> Path:
    return cache / "collections" / f"ansible-{ANSIBLE_VERSION}"


def installed_version(root: Path) -> str | None:
    manifest = root / "ansible_collections" / "awx" / "awx" / "MANIFEST.json"
    try:
        info = json.loads(manifest.read_text(encoding="utf-8"))["collection_info"]
    except (OSError, ValueError, KeyError):
        return None
    return str(info["version"]) if (info.get("namespace"), info.get("name")) == ("awx", "awx") else None


def install(cache: Path = CACHE) -> Path:
    """The collections path holding awx.awx, made on first use. Atomic: a half-extracted copy is never seen."""
    root = collections_path(cache)
    if installed_version(root) == AWX_VERSION:
        return root
    root.parent.mkdir(parents=True, exist_ok=True)
    with tempfile.TemporaryDirectory(prefix=".awx-", dir=root.parent) as work:
        wheels = Path(work) / "wheels"
        requirement = Path(work) / "requirements.txt"
        requirement.write_text(f"ansible=={ANSIBLE_VERSION} --hash=sha256:{ANSIBLE_WHEEL_SHA256}\n", encoding="utf-8")
        subprocess.run(
            [sys.executable, "-m", "pip", "download", "--quiet", "--no-deps", "--only-binary=:all:", "--require-hashes",
             "--dest", str(wheels), "-r", str(requirement)],
            check=True,
        )
        wheel = next(wheels.glob(f"ansible-{ANSIBLE_VERSION}-*.whl"))
        digest = hashlib.sha256(wheel.read_bytes()).hexdigest()
        if digest != ANSIBLE_WHEEL_SHA256:
            raise SystemExit(f"{wheel.name}: sha256 {digest}, expected {ANSIBLE_WHEEL_SHA256}")
        staging = Path(work) / "root"
        with zipfile.ZipFile(wheel) as archive:
            for member in archive.namelist():
                if member.startswith(MEMBER_PREFIX) and ".." not in member.split("/"):
                    archive.extract(member, staging)
        if installed_version(staging) != AWX_VERSION:
            raise SystemExit(f"{wheel.name} does not hold awx.awx {AWX_VERSION}")
        if root.exists():
            shutil.rmtree(root)
        staging.rename(root)
    return root


def link(root: Path, target: Path) -> Path:
    """``target/ansible_collections/awx`` -> the cached awx namespace (replacing an older link)."""
    namespace = target / "ansible_collections" / "awx"
    namespace.parent.mkdir(parents=True, exist_ok=True)
    if namespace.is_symlink():
        namespace.unlink()
    elif namespace.exists():
        raise SystemExit(f"{namespace} exists and is not a link: remove it first")
    namespace.symlink_to(root / "ansible_collections" / "awx", target_is_directory=True)
    return namespace


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n", maxsplit=1)[0])
    parser.add_argument("--link", type=Path, metavar="COLLECTIONS_PATH", help="also link awx.awx into this collections path")
    args = parser.parse_args()
    root = install()
    if args.link:
        link(root, args.link)
    print(root)


if __name__ == "__main__":
    main()
