"""What the guard knows of one incident: the context its rules bind arguments to.

Built from what service_check reported: on the controller from the failure it received, on the host by the executor
from what it reads again at the moment of a step. One builder, so both sides judge the same facts the same way.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from dataclasses import dataclass, field
from typing import AbstractSet, Any, Iterable, Mapping

from ansible_collections.sentinel.heal.plugins.module_utils._configuration_tests import configuration_test

# system directories where a package puts one file named for its service: that file is the service's own
SHARED_CONFIGURATION_DIRS = ("/etc/default", "/etc/logrotate.d", "/etc/init.d", "/etc/sysconfig")
_PG_CLUSTER = re.compile(r"/var/lib/postgresql/(\d+)/([A-Za-z0-9_-]+)(/|$)|postgresql-(\d+)-([A-Za-z0-9_-]+)\.log$")
_HTTP_URL = re.compile(r"^(?P<scheme>https?)://(\[[^]]*\]|[^/:]*)(:(?P<port>[0-9]{1,5}))?(/|$)")
# where systemd makes each directory a unit names in these settings
SYSTEMD_DIRECTORIES = {"RuntimeDirectory": "/run", "StateDirectory": "/var/lib", "CacheDirectory": "/var/cache", "LogsDirectory": "/var/log"}
# where an entry of the policy's own table comes from, as a person reads it beside the host's
POLICY_TABLE = "the policy's package_paths"
# what of the host's reading of a directory is taken (service_check's owned_dirs): plain paths, names and modes only
_OWNED_PATH = re.compile(r"^(/[A-Za-z0-9@._+-]+)+$")
_ACCOUNT = re.compile(r"^[A-Za-z0-9_][A-Za-z0-9_.-]{0,31}$")
_MODE = re.compile(r"^[0-7]{3,4}$")
_HOST_SOURCE = re.compile(r"^(?:unit (?:RuntimeDirectory|StateDirectory|CacheDirectory|LogsDirectory)=|dpkg-statoverride"
                          r"|seen while healthy at \d{4}-\d\d-\d\dT\d\d:\d\d:\d\dZ)$")


@dataclass(frozen=True)
class PackagePath:
    """A directory of a service with the only owner, group and mode remediation may give back: as the host reads them
    (service_check's ``owned_dirs``: its unit, dpkg-statoverride, what it was while healthy) or, where the host says
    nothing, as the policy's package_paths say its package made it. ``tree``: everything below belongs to the same
    owner and group. A component of a table entry's ``path`` may be a shell pattern (``/var/lib/postgresql/*/main``);
    the host's are plain paths. ``services``: the table entry's (none for the host's, which are the incident's own).
    ``source``: where the entry comes from, for a person."""

    services: tuple[str, ...]
    path: str
    owner: str
    group: str
    mode: int
    tree: bool = False
    source: str = POLICY_TABLE

    def top_of(self, path: str) -> str | None:
        """The directory of this entry that ``path`` is, or is below when the entry is a tree."""
        pattern, parts = self.path.split("/"), path.split("/")
        if len(parts) < len(pattern) or (len(parts) > len(pattern) and not self.tree):
            return None
        if not all(fnmatch.fnmatchcase(part, expected) for part, expected in zip(parts, pattern)):
            return None
        return "/".join(parts[:len(pattern)])


@dataclass(frozen=True)
class PolicyContext:
    """What the incident knows, so rules can bind arguments to it (the service's own unit, ...)."""

    service: str | None = None
    init_service: str | None = None
    # the systemd unit service_check found running the service (postgresql@15-main behind Debian's postgresql)
    unit: str | None = None
    # every name systemd knows that unit by (its Names=, without .service): Debian's redis-server is redis too
    unit_names: frozenset[str] = frozenset()
    process: str | None = None
    port_owners: Mapping[int, str] = field(default_factory=dict)
    # the port owners that are another service's processes, each with that service (the systemd unit whose cgroup holds
    # it, or the other declared service whose process or pid file it is): that service, never a squatter
    other_service_pids: Mapping[int, str] = field(default_factory=dict)
    # the service's own processes, as service_check saw them: its units' cgroups (systemd), else its pid file's process
    # and what descends from it; never a process that only carries its name
    service_pids: frozenset[int] = frozenset()
    # the port owners on its own port that run its program and are in no service's unit: a server its init script lost
    # (nginx's workers left when the sysv master was killed), the service's too
    lost_pids: frozenset[int] = frozenset()
    # the port owners service_check saw running as root: outside service_pids, no placeholder binds one
    root_pids: frozenset[int] = frozenset()
    ports: frozenset[int] = frozenset()
    stale_pidfile: str | None = None
    # declared Unix sockets nothing has bound, and their lock files naming a pid that is not the service's
    stale_sockets: tuple[str, ...] = ()
    stale_locks: tuple[str, ...] = ()
    log_files: tuple[str, ...] = ()
    service_dirs: tuple[str, ...] = ()
    log_dirs: tuple[str, ...] = ()
    # the ports of the service's declared HTTP check: the only ones a loopback HTTP probe may reach
    http_ports: frozenset[int] = frozenset()
    # the inventory's hosts (names and addresses): with loopback, the only hosts a probe may reach
    probe_hosts: AbstractSet[str] = frozenset()
    # the PostgreSQL clusters (version, name) the service declares: the only ones pg_ctlcluster may act on
    pg_clusters: frozenset[tuple[str, str]] = frozenset()
    # who owns each directory on the way to the service's declared paths, as service_check saw it on the host
    # ("(link)" for a symbolic link): a repair below a directory a service account owns could be redirected
    path_owners: Mapping[str, str] = field(default_factory=dict)
    # the ownership, mode and directory repairs are the host's executor's own (module_utils/_host/nofollow.py): it walks each
    # path from / one directory at a time without following a link, refusing one met anywhere, the last component
    # included, so a link a service account swaps in on the way cannot redirect them and who owns the directories on
    # the way (path_owners) does not decide whether they run unattended; False where the step runs as the command
    repairs_without_following_links: bool = False
    # the host's mount points, when service_check reported them: a recursive repair never crosses one
    mounts: tuple[str, ...] | None = None
    # files of the service outside its directories: its unit file and drop-ins, pid file, sockets, logs, and the files
    # named for it in the system's shared directories (/etc/default/NAME, ...)
    own_files: tuple[str, ...] = ()
    # the service's files that changed since its last known good configuration, each with the hash of the copy kept
    # on the host: the only files, and the only copies, a restore may put back
    known_good_copies: Mapping[str, str] = field(default_factory=dict)
    # how a restore runs for this service: with a person's approval, unattended, or never
    restore_known_good: str = "approve"
    # whether the service has a configuration test that the host runs on a restored file (undoing the restore when it
    # fails): without one, nothing checks the file before the service reads it, and a person approves even with auto
    restore_tested: bool = False
    # apt's files of the versions the service's packages had before an upgrade or removal since its last known good
    # configuration: the only packages a downgrade may install
    cached_packages: frozenset[str] = frozenset()
    # the service's directories with the owner, group and mode the host says they should have (service_check's
    # owned_dirs, validated: owned_dirs_of), most specific first; the policy's package_paths speak where it says nothing
    owned_dirs: tuple[PackagePath, ...] = ()

    @classmethod
    def from_failure(cls, failure: Any, probe_hosts: Iterable[str] = (), *, repairs_without_following_links: bool = False) -> PolicyContext:
        """The context of a failure service_check reported (anything with its ``service``, ``init_service``,
        ``unit``, ``spec`` and ``evidence``: the controller's Failure, or what the executor on the host reads
        again). ``probe_hosts`` that is a set is kept as it is (the controller's reads the inventory only when a probe
        is judged). ``repairs_without_following_links``: the steps go to the host's executor, which does the repairs
        itself (the executor says so when it judges, the controller when it sends them there)."""
        spec, evidence = failure.spec, failure.evidence
        pidfile = evidence.get("pidfile") or {}
        seen_owners = [owner for owner in evidence.get("port_owners") or [] if isinstance(owner.get("pid"), int)]
        owners = {int(owner["pid"]): str(owner.get("process", "")) for owner in seen_owners}
        own_names = {failure.init_service, failure.unit}
        # a port owner in the cgroup of one of the service's own units is the service's own, whatever its name
        in_own_units = {int(owner["pid"]) for owner in seen_owners if _in_own_unit(owner, own_names)}
        other_services = {int(owner["pid"]): other for owner in seen_owners for other in [_other_service(owner, own_names)] if other}
        placed = in_own_units | set(other_services)
        lost = {int(owner["pid"]) for owner in seen_owners if owner.get("service_program") and int(owner["pid"]) not in placed}
        process = str(spec.get("process") or failure.init_service)
        names = dict.fromkeys((failure.service, failure.init_service))
        logs = [str(p) for p in spec.get("logs") or ()]
        stale_sockets, stale_locks = left_over_sockets(evidence)
        return cls(
            service=failure.service,
            init_service=failure.init_service,
            unit=failure.unit,
            unit_names=_unit_names(failure),
            process=process,
            port_owners=owners,
            other_service_pids=other_services,
            service_pids=frozenset(int(pid) for pid in evidence.get("service_pids") or [] if isinstance(pid, int)) | in_own_units,
            lost_pids=frozenset(lost),
            root_pids=frozenset(int(owner["pid"]) for owner in seen_owners if owner.get("root")),
            ports=frozenset(int(port) for port in spec.get("ports") or []),
            stale_pidfile=pidfile.get("path") if pidfile.get("exists") and not pidfile.get("alive") else None,
            stale_sockets=stale_sockets,
            stale_locks=stale_locks,
            log_files=tuple(logs),
            service_dirs=service_dirs(failure),
            log_dirs=tuple(dict.fromkeys([f"/var/log/{name}" for name in names] + [posixpath.dirname(posixpath.normpath(log)) for log in logs])),
            http_ports=frozenset(port for port in [_http_port((spec.get("http") or {}).get("url"))] if port is not None),
            probe_hosts=probe_hosts if isinstance(probe_hosts, AbstractSet) else frozenset(probe_hosts),
            pg_clusters=_pg_clusters([*(str(p) for p in spec.get("paths") or []), str(spec.get("pidfile") or ""), *logs]),
            path_owners={str(path): str(owner) for path, owner in (evidence.get("path_owners") or {}).items()},
            repairs_without_following_links=repairs_without_following_links,
            mounts=None if evidence.get("mounts") is None else tuple(str(mount) for mount in evidence["mounts"]),
            own_files=_own_files_of(failure),
            known_good_copies={str(change["path"]): str(change["good_sha256"]) for change in (evidence.get("changes") or {}).get("files") or []
                               if isinstance(change, Mapping) and change.get("good_sha256") and change.get("path")},
            restore_known_good=str(spec.get("restore_known_good") or "approve"),
            restore_tested=bool(configuration_test(spec)) if spec.get("name") else False,
            cached_packages=frozenset(str(change["cached"]) for change in (evidence.get("changes") or {}).get("packages") or []
                                      if isinstance(change, Mapping) and change.get("cached")),
            owned_dirs=owned_dirs_of(failure),
        )


def owned_dirs_of(failure: Any) -> tuple[PackagePath, ...]:
    """The service's directories as the host reads them (service_check's ``owned_dirs``), most specific first. Of each
    entry only its path, owner, group, mode and tree are taken, and only when all are plain: one of the service's own
    directories (``service_dirs``, its unit's) written absolute and normal, account and group names, a mode without the
    setuid bit that others may write only with the sticky bit (/tmp's way). An entry that is not is left out, and the
    policy's package_paths speak for its path; its ``source`` is kept only as the words the host uses."""
    own = set(service_dirs(failure)) | unit_directories(failure.evidence.get("unit") or {})
    # the host writes a declared /var/run/x as /run/x, where its link leads on every Debian host
    own |= {"/run" + path[len("/var/run"):] for path in own if path.startswith("/var/run/")}
    found: dict[str, PackagePath] = {}
    for entry in failure.evidence.get("owned_dirs") or ():
        if isinstance(entry, Mapping):
            taken = _owned_dir(entry, own)
            if taken is not None and taken.path not in found:
                found[taken.path] = taken
    return tuple(sorted(found.values(), key=lambda entry: entry.path.count("/"), reverse=True))


def _owned_dir(entry: Mapping[str, Any], own: AbstractSet[str]) -> PackagePath | None:
    path, owner, group, mode, source = (entry.get(key) for key in ("path", "owner", "group", "mode", "source"))
    if not (isinstance(path, str) and _OWNED_PATH.match(path) and posixpath.normpath(path) == path and path in own):
        return None
    if not all(isinstance(name, str) and _ACCOUNT.match(name) for name in (owner, group)):
        return None
    if not (isinstance(mode, str) and _MODE.match(mode)) or not _safe_mode(int(mode, 8)):
        return None
    return PackagePath(services=(), path=path, owner=str(owner), group=str(group), mode=int(mode, 8), tree=entry.get("tree") is True,
                       source=source if isinstance(source, str) and _HOST_SOURCE.match(source) else "the host")


def _safe_mode(mode: int) -> bool:
    """A directory's mode a repair may give unattended: no setuid (meaningless on a directory, a sign of a mode gone
    wrong), and writable by others only with the sticky bit. The setgid bit is a directory's own (2750, 2775)."""
    return not mode & 0o4000 and (not mode & 0o002 or bool(mode & 0o1000))


def unit_directories(unit: Mapping[str, Any]) -> frozenset[str]:
    """The directories systemd makes for a unit at its start (``RuntimeDirectory=`` in /run, ``StateDirectory=`` in
    /var/lib, ...), as service_check's evidence reports the unit."""
    return frozenset(f"{top}/{name}" for setting, top in SYSTEMD_DIRECTORIES.items() for name in str(unit.get(setting) or "").split())


def _unit_names(failure: Any) -> frozenset[str]:
    """The names of the unit service_check found running the service, as systemd reports them (its ``Names=``: the
    unit and its aliases), without ``.service``."""
    if failure.unit is None:
        return frozenset()
    names = str((failure.evidence.get("unit") or {}).get("Names") or "").split()
    return frozenset(name[:-len(".service")] if name.endswith(".service") else name for name in names)


def _other_service(owner: Mapping[str, Any], own_units: AbstractSet[str | None]) -> str | None:
    """The other service a port owner is a process of: the declared service service_check named, or the systemd service
    whose cgroup holds it when that is none of the incident's own units; None for a process outside any service's unit
    (a login session's, a scope's, a host without systemd's), which is a squatter."""
    if _in_own_unit(owner, own_units):
        return None
    if owner.get("service"):
        return str(owner["service"])
    unit = str(owner.get("unit") or "")
    return unit if unit.endswith(".service") else None


def _in_own_unit(owner: Mapping[str, Any], own_units: AbstractSet[str | None]) -> bool:
    """Whether a port owner is in the cgroup of one of the incident's units: as service_check found them (``own``), or,
    where systemctl could not say more, the unit named for the service."""
    unit = str(owner.get("unit") or "")
    return bool(owner.get("own")) or (unit.endswith(".service") and unit[:-len(".service")] in own_units)


def _own_files_of(failure: Any) -> tuple[str, ...]:
    """The service's files outside its directories: declared, its unit's, named for it in shared directories, and
    what its packages put in /etc (service_check's ``packages``)."""
    spec, unit = failure.spec, failure.evidence.get("unit") or {}
    names = dict.fromkeys(name for name in (failure.service, failure.init_service) if name)
    declared = [*(spec.get("logs") or []), *(spec.get("sockets") or []), *([spec["pidfile"]] if spec.get("pidfile") else [])]
    unit_files = [unit.get("FragmentPath") or "", *str(unit.get("DropInPaths") or "").split()]
    shared = [f"{directory}/{name}" for name in names for directory in SHARED_CONFIGURATION_DIRS]
    packaged = (failure.evidence.get("packages") or {}).get("etc") or []
    return tuple(dict.fromkeys(str(path) for path in [*declared, *unit_files, *shared, *packaged] if str(path).startswith("/")))


def left_over_sockets(evidence: Mapping[str, Any]) -> tuple[tuple[str, ...], tuple[str, ...]]:
    """The declared Unix sockets service_check saw nothing bound to, and the lock files it saw naming a pid that is not
    the service's (its ``evidence.sockets``)."""
    sockets = [info for info in evidence.get("sockets") or () if isinstance(info, Mapping)]
    return (tuple(str(info["path"]) for info in sockets if info.get("stale")),
            tuple(str(info["lock"]["path"]) for info in sockets if (info.get("lock") or {}).get("stale")))


def _pg_clusters(paths: Iterable[str]) -> frozenset[tuple[str, str]]:
    clusters = set()
    for path in paths:
        match = _PG_CLUSTER.search(path)
        if match:
            version, name = (match.group(1), match.group(2)) if match.group(1) else (match.group(4), match.group(5))
            clusters.add((version, name))
    return frozenset(clusters)


def _http_port(url: Any) -> int | None:
    match = _HTTP_URL.match(str(url or ""))
    return None if match is None else url_port(match)


def url_port(match: re.Match[str]) -> int:
    """The port a URL reaches: the one it names, or its scheme's."""
    return int(match.group("port")) if match.group("port") else (443 if match.group("scheme") == "https" else 80)


def service_dirs(failure: Any) -> tuple[str, ...]:
    """Directories that belong to the service: declared ``paths``, the usual per-service directories
    and the directories of its log files. Remediation may write only below these; the policy drops
    the shared ones (``/var/log`` when a log is ``/var/log/auth.log``) when it compares."""
    names = dict.fromkeys((failure.service, failure.init_service))
    candidates = [str(p) for p in failure.spec.get("paths") or []]
    candidates += [f"{base}/{name}" for name in names for base in ("/var/log", "/run", "/var/run", "/var/lib", "/var/cache")]
    candidates += [posixpath.dirname(str(log)) for log in failure.spec.get("logs") or []]
    return tuple(dict.fromkeys(posixpath.normpath(c) for c in candidates if c.startswith("/")))


def running_unit(evidence: Mapping[str, Any], service_manager: Any) -> str | None:
    """The systemd unit service_check found running the service (it resolves wrappers and aliases), without its
    ``.service`` suffix; None on hosts without systemd."""
    unit = evidence.get("unit") or {}
    if service_manager != "systemd" or not unit.get("Id"):
        return None
    name = str(unit["Id"])
    return name[:-len(".service")] if name.endswith(".service") else name
