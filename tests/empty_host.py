"""The host the unit tests' probe reads (module_utils: service_check, the executor, the last known good copies): a
Debian host without systemd and with no package installed, below a directory of the test's own. What the probe reads
there - dpkg's database and log, apt's archive, /etc with its init scripts, systemd's runtime directory, the maintenance
marker, the known good copies, the service's directories (/run/NAME, /var/lib/NAME, ...) and dpkg's overrides of their
owners, sudo and its rules - it never reads on the machine the tests run on, whatever that machine has installed.
Its processes, sockets and filesystems are still the machine's: the tests start their own."""

from __future__ import annotations

from pathlib import Path
from types import ModuleType

from ansible_collections.sentinel.heal.plugins.module_utils._host import installation as _installation
from ansible_collections.sentinel.heal.plugins.module_utils._host import known_good as _known_good
from ansible_collections.sentinel.heal.plugins.module_utils._host import maintenance as _maintenance
from ansible_collections.sentinel.heal.plugins.module_utils._host import owned_dirs as _owned_dirs
from ansible_collections.sentinel.heal.plugins.module_utils._host import sudo_rules as _sudo_rules

# each setting the probe reads where it is called, and its place below the host's root
PLACES: dict[tuple[ModuleType, str], str] = {
    (_installation, "ETC"): "etc",
    (_installation, "SYSTEMD_RUNTIME"): "run/systemd/system",
    (_installation, "DPKG_INFO"): "var/lib/dpkg/info",
    (_known_good, "ETC"): "etc",
    (_known_good, "DPKG_INFO"): "var/lib/dpkg/info",
    (_known_good, "DPKG_STATUS"): "var/lib/dpkg/status",
    (_known_good, "DPKG_LOG"): "var/log/dpkg.log",
    (_known_good, "APT_ARCHIVES"): "var/cache/apt/archives",
    (_known_good, "KNOWN_GOOD_DIR"): "var/lib/sentinel-heal/known-good",
    (_owned_dirs, "RUN"): "run",
    (_owned_dirs, "STATE"): "var/lib",
    (_owned_dirs, "CACHE"): "var/cache",
    (_owned_dirs, "LOGS"): "var/log",
    (_owned_dirs, "DPKG_STATOVERRIDE"): "var/lib/dpkg/statoverride",
    (_maintenance, "MARKER"): "etc/sentinel-heal/maintenance",
    (_sudo_rules, "SUDO"): "usr/bin/sudo",
    (_sudo_rules, "SUDOERS"): "etc/sudoers",
}
# what such a host has of them: these directories, empty (no systemd, so no runtime directory)
DIRECTORIES = ("etc/init.d", "var/lib/dpkg/info", "var/cache/apt/archives")


def settings(root: Path) -> dict[tuple[ModuleType, str], str]:
    """The empty host at ``root``, made: each setting's value there."""
    for directory in DIRECTORIES:
        (root / directory).mkdir(parents=True)
    return {place: str(root / relative) for place, relative in PLACES.items()}


def in_python() -> str:
    """Python statements that give a process the test starts (the executor, as sudo starts it) the host this process
    reads now."""
    imports = [f"import {name}" for name in sorted({module.__name__ for module, _setting in PLACES})]
    return "; ".join(imports + [f"{module.__name__}.{setting} = {getattr(module, setting)!r}" for module, setting in PLACES])
