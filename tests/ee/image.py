"""The execution environment built on this machine, with podman, from a Debian base made here.

No container registry is reachable from this machine, so the UBI image the shipped definition
(docs/execution-environment/execution-environment.yml) starts from cannot be pulled. What is built instead:

* a base image made locally: debootstrap of Debian bookworm with python3, pip and the CA bundle, imported into podman;
  tagged with a digest of what makes it (suite, mirror, packages), so it is made once and again only when those change;
* the Debian variant of the definition, derived from the shipped one by `debian_definition` (the base image, the
  Python interpreter, apt-get as package manager, pip from Debian instead of ensurepip, which Debian disables): one
  source, never two hand-edited copies. It also carries ansible-rulebook and Java, so that the same image serves as
  the rulebooks' decision environment;
* the image, from `ansible-builder create` and `podman build`. The package index is reached through a proxy whose CA
  is in this machine's bundle: the build mounts that bundle over the image's own, so the build trusts it and the image
  does not keep it.

Podman's settings for this kernel are in tests/ee/containers.conf (runc, ulimits): the Makefile exports
CONTAINERS_CONF, so every podman call (this script's, ansible-runner's, ansible-rulebook's) reads them.

    python tests/ee/image.py build     # prints the image's name once built
"""

from __future__ import annotations

import argparse
import copy
import fcntl
import hashlib
import os
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path
from typing import Any

import yaml

ROOT = Path(__file__).resolve().parents[2]
UBI_DEFINITION = ROOT / "docs" / "execution-environment" / "execution-environment.yml"
BUILD_DIR = ROOT / "build" / "ee-debian"
CONTAINERS_CONF = Path(__file__).resolve().parent / "containers.conf"

SUITE = "bookworm"
MIRROR = "http://deb.debian.org/debian"
# python3-pip: ansible-builder bootstraps pip with ensurepip, which Debian's python refuses; Debian's own pip is used
# instead (skip_pip_install). ca-certificates: the image's trust store, which a job talking to an LLM over TLS needs.
BASE_PACKAGES = ("python3", "python3-pip", "ca-certificates")
BASE_IMAGE = "localhost/sentinel-heal-debian-base"
# The image doubles as the decision environment of the rulebooks (extensions/eda): ansible-rulebook and the Java it
# runs on, as requirements-dev.txt gives them to the tests here.
DECISION_PACKAGES = ("openjdk-17-jre-headless",)
HOST_CA_BUNDLE = Path("/etc/ssl/certs/ca-certificates.crt")


def version() -> str:
    return str(yaml.safe_load((ROOT / "galaxy.yml").read_text(encoding="utf-8"))["version"])


def image_name() -> str:
    return f"localhost/sentinel-heal-ee:{version()}-debian"


def base_image_name() -> str:
    recipe = "\n".join([SUITE, MIRROR, *BASE_PACKAGES])
    return f"{BASE_IMAGE}:{hashlib.sha256(recipe.encode()).hexdigest()[:12]}"


def use_engine_settings() -> None:
    """This machine's podman settings for this process and every podman it starts (ansible-runner's, ansible-rulebook's),
    unless CONTAINERS_CONF names others (as the Makefile does, with the same file)."""
    os.environ.setdefault("CONTAINERS_CONF", str(CONTAINERS_CONF))


def podman(*args: str, check: bool, **kwargs: Any) -> subprocess.CompletedProcess[str]:
    use_engine_settings()
    return subprocess.run(["podman", *args], check=check, text=True, **kwargs)


def image_exists(name: str) -> bool:
    return podman("image", "exists", name, check=False).returncode == 0


def ensure_base() -> str:
    """The Debian base image, made unless podman already has the one of this recipe."""
    name = base_image_name()
    if image_exists(name):
        return name
    print(f"== making the base image {name}: debootstrap {SUITE} with {', '.join(BASE_PACKAGES)} (about a minute, once)", flush=True)
    with tempfile.TemporaryDirectory(prefix="sentinel-heal-ee-base.", dir="/var/tmp") as work:
        rootfs = Path(work) / "rootfs"
        subprocess.run(["debootstrap", "--variant=minbase", f"--include={','.join(BASE_PACKAGES)}", SUITE, str(rootfs), MIRROR],
                       check=True, stdout=subprocess.DEVNULL)
        # the downloaded packages are installed; apt's package lists stay, so that bindep's apt-get install finds packages
        for archive in (rootfs / "var" / "cache" / "apt" / "archives").glob("*.deb"):
            archive.unlink()
        tar = subprocess.Popen(["tar", "-C", str(rootfs), "--numeric-owner", "-c", "."], stdout=subprocess.PIPE)
        podman("import", "--change", 'CMD ["/bin/bash"]', "-", name, check=True, stdin=tar.stdout, stdout=subprocess.DEVNULL)
        if tar.wait() != 0:
            raise SystemExit(f"tar of {rootfs} failed with exit status {tar.returncode}")
    return name


def shipped_definition() -> dict[str, Any]:
    shipped: dict[str, Any] = yaml.safe_load(UBI_DEFINITION.read_text(encoding="utf-8"))
    return shipped


def debian_definition(ubi: dict[str, Any], base_image: str, definition_dir: Path, source_dir: Path = UBI_DEFINITION.parent) -> dict[str, Any]:
    """The shipped (UBI) definition, changed only where Debian differs; its build files' paths (relative to source_dir,
    where the shipped definition is) made relative to definition_dir, where the variant is written."""
    variant = copy.deepcopy(ubi)
    variant["images"]["base_image"]["name"] = base_image
    # python3 and pip are in the base (Debian's pip: ansible-builder's ensurepip bootstrap is refused by Debian)
    variant["dependencies"]["python_interpreter"] = {"python_path": "/usr/bin/python3"}
    options = variant.setdefault("options", {})
    options["package_manager_path"] = "/usr/bin/apt-get"
    options["skip_pip_install"] = True
    options["tags"] = [image_name()]
    for build_file in variant.get("additional_build_files", []):
        source = (source_dir / build_file["src"]).resolve()
        build_file["src"] = os.path.relpath(source, definition_dir)
    steps = variant.setdefault("additional_build_steps", {})
    rulebook = next(line.strip() for line in (ROOT / "requirements-dev.txt").read_text(encoding="utf-8").splitlines()
                    if line.startswith("ansible-rulebook"))
    steps["append_base"] = [
        # apt's lists stay until the end of the final stage: the builder stage's bindep installs from them too
        f"RUN apt-get update -q && apt-get install -y -q --no-install-recommends {' '.join(DECISION_PACKAGES)} && apt-get clean",
        f"RUN $PYCMD -m pip install --no-cache-dir '{rulebook}'",
        *steps.get("append_base", []),
    ]
    # bindep's packages come from apt: its lists refreshed first, and not kept in the image
    steps["prepend_final"] = ["RUN apt-get update -q"]
    steps["append_final"] = [*steps.get("append_final", []), "RUN apt-get clean && rm -rf /var/lib/apt/lists/*"]
    return variant


def build() -> str:
    """Build the collection's tarball and the image from it; return the image's name. One build at a time: `make test`
    starts one beside the lab scenarios, whose test of the image then waits for it and finds every layer cached."""
    BUILD_DIR.mkdir(parents=True, exist_ok=True)
    with open(BUILD_DIR / "build.lock", "w", encoding="utf-8") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)
        return _build()


def _build() -> str:
    base = ensure_base()
    tarballs = ROOT / "build"
    for old in tarballs.glob("sentinel-heal-*.tar.gz"):
        old.unlink()
    subprocess.run(["ansible-galaxy", "collection", "build", "--force", "--output-path", str(tarballs), str(ROOT)],
                   check=True, stdout=subprocess.DEVNULL)
    definition = BUILD_DIR / "execution-environment.yml"
    definition.write_text(yaml.safe_dump(debian_definition(shipped_definition(), base, BUILD_DIR), sort_keys=False), encoding="utf-8")
    context = BUILD_DIR / "context"
    shutil.rmtree(context, ignore_errors=True)
    subprocess.run(["ansible-builder", "create", "-f", str(definition), "-c", str(context), "--output-filename", "Containerfile"],
                   check=True, stdout=subprocess.DEVNULL)
    name = image_name()
    print(f"== building {name} (layers cached by podman: after the first build, the collection's layers only; "
          f"the output in {BUILD_DIR / 'build.log'})", flush=True)
    log = BUILD_DIR / "build.log"
    with log.open("w", encoding="utf-8") as output:
        built = podman("build", "--layers", "-f", str(context / "Containerfile"), "-t", name,
                       "--volume", f"{HOST_CA_BUNDLE}:/etc/ssl/certs/ca-certificates.crt:ro", str(context),
                       check=False, stdout=output, stderr=subprocess.STDOUT)
    if built.returncode != 0:
        raise SystemExit(f"podman build of {name} failed (exit status {built.returncode}); its output, in {log}, ends:\n"
                         f"{log.read_text(encoding='utf-8', errors='replace')[-4000:]}")
    # the images of earlier builds, untagged now: gone, or every commit's build would stay on the disk (the layers a
    # build reuses are kept, as the current image's parents)
    podman("image", "prune", "--force", check=True, stdout=subprocess.DEVNULL)
    return name


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("command", choices=["base", "definition", "build", "name"])
    args = parser.parse_args(argv)
    if args.command == "base":
        print(ensure_base())
    elif args.command == "definition":
        print(yaml.safe_dump(debian_definition(shipped_definition(), base_image_name(), BUILD_DIR), sort_keys=False), end="")
    elif args.command == "build":
        print(build())
    else:
        print(image_name())
    return 0


if __name__ == "__main__":
    sys.exit(main())
