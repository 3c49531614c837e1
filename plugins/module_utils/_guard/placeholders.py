"""The placeholders of the policy's argument patterns: what binds an argument to the incident (its units, processes,
ports, files and directories, as service_check saw them) and the plain shapes of the rest (counts, words, globs).

Each takes the argument, the letters its pattern allows, the incident's context and the policy, and says yes or no.
"""

from __future__ import annotations

import posixpath
import re
from typing import Callable, Iterable, Iterator, Protocol

from ansible_collections.sentinel.heal.plugins.module_utils._guard.context import PackagePath, PolicyContext, url_port
from ansible_collections.sentinel.heal.plugins.module_utils._guard.paths import PathResolver

LOOPBACK_HOSTS = frozenset({"127.0.0.1", "localhost", "::1", "ip6-localhost"})
# where services keep their data: a read of the incident's files names its declared ones there, nothing else
DATA_AREAS = ("/var/lib", "/var/cache", "/var/spool", "/srv", "/opt", "/home", "/var/backups")
_CANONICAL_INT = re.compile(r"^(0|[1-9][0-9]*)$")
_SED_PRINT = re.compile(r"^([1-9][0-9]*(,[1-9][0-9]*)?)?p$")
# curl -w text that prints only numbers curl measured: not @FILE (reads a file), %output{} (writes one), %header{},
# %{url}, %{json} or any other variable that carries what the server or the command said.
_CURL_WRITE_OUT = re.compile(
    r"^([A-Za-z0-9 :=,._/-]|\\n)*(%\{(http_code|response_code|http_connect|time_namelookup|time_connect|time_appconnect|time_pretransfer"
    r"|time_redirect|time_starttransfer|time_total|size_download|size_header|size_request|size_upload|speed_download|speed_upload"
    r"|num_connects|num_redirects|exitcode)\}([A-Za-z0-9 :=,._/-]|\\n)*)+$")
# What systemctl show -p may print of a unit: its state, its main process, its resources and limits, its files' and
# its dependencies' names. Never Environment=, the Exec*= command lines or the credentials, which may hold secrets.
UNIT_PROPERTIES = frozenset({
    "Id", "Names", "Description", "Type", "LoadState", "LoadError", "ActiveState", "SubState", "Result", "UnitFileState",
    "UnitFilePreset", "FragmentPath", "DropInPaths", "SourcePath", "MainPID", "ExecMainPID", "ExecMainCode", "ExecMainStatus",
    "ExecMainStartTimestamp", "ExecMainExitTimestamp", "NRestarts", "StatusText", "StatusErrno", "Restart", "RestartUSec",
    "RemainAfterExit", "StartLimitBurst", "StartLimitIntervalUSec", "StartLimitAction", "TimeoutStartUSec", "TimeoutStopUSec",
    "WatchdogUSec", "ActiveEnterTimestamp", "ActiveExitTimestamp", "InactiveEnterTimestamp", "InactiveExitTimestamp",
    "StateChangeTimestamp", "ConditionResult", "AssertResult", "User", "Group", "PIDFile", "WorkingDirectory",
    "RuntimeDirectory", "StateDirectory", "CacheDirectory", "LogsDirectory", "ConfigurationDirectory", "ControlGroup",
    "MemoryCurrent", "MemoryPeak", "MemoryHigh", "MemoryMax", "TasksCurrent", "TasksMax", "CPUUsageNSec", "LimitNOFILE",
    "LimitNOFILESoft", "LimitNPROC", "LimitNPROCSoft", "LimitCORE", "OOMPolicy", "OOMScoreAdjust", "KillMode", "KillSignal",
    "Requires", "Requisite", "Wants", "BindsTo", "PartOf", "ConsistsOf", "WantedBy", "RequiredBy", "Conflicts", "Before",
    "After",
})
# A value that starts with "-" becomes an option of the tool, or of one it wraps (service passes it to systemctl).
_WORD = re.compile(r"^[A-Za-z0-9@._+,:%=][A-Za-z0-9@._+,:%=-]*$")
_NAME = re.compile(r"^[A-Za-z0-9@._+][A-Za-z0-9@._+-]*$")
# what /proc tells of a process's state and limits (not its environment, memory, command line or open files)
_PROCESS_STATE_FILE = re.compile(r"^/proc/([1-9][0-9]*)/(status|limits|stat|statm|io|oom_score|oom_score_adj|cgroup|wchan)$")
_SIGNED_SIZE = re.compile(r"^[+-]?[1-9][0-9]{0,8}[ckMG]?$")
_ROTATED_LOG = re.compile(r"\.(\d+|gz|xz|bz2|zst|old)$")
_GLOB = re.compile(r"^[A-Za-z0-9@._*?-]+$")
_UNIT_INSTANCE = re.compile(r"^[A-Za-z0-9_.:-]+@[A-Za-z0-9_.:-]+?(\.service)?$")
# No userinfo, query or escapes: what reaches the service is a plain GET of a plain path.
_LOOPBACK_URL = re.compile(r"^(?P<scheme>https?)://(127\.0\.0\.1|localhost|\[::1\])(:(?P<port>[1-9][0-9]{0,4}))?(/[A-Za-z0-9._~/-]*)?$")


class PolicyView(Protocol):
    """What a placeholder or a restore asks of the policy (``rules.Policy`` is one): typed so, they need not import the
    module whose patterns call them."""

    @property
    def paths(self) -> PathResolver: ...

    @property
    def protected_processes(self) -> frozenset[str]: ...

    @property
    def protected_services(self) -> frozenset[str]: ...

    def is_secret(self, arg: str) -> bool: ...

    def is_protected(self, arg: str) -> bool: ...

    def is_system_read(self, path: str) -> bool: ...

    def package_path(self, path: str, context: PolicyContext) -> tuple[str, PackagePath] | None: ...


def is_canonical_int(arg: str) -> bool:
    return bool(_CANONICAL_INT.match(arg))


def under(path: str, directory: str) -> bool:
    return path == directory or path.startswith(directory.rstrip("/") + "/")


def _protected_pids(context: PolicyContext, policy: PolicyView) -> frozenset[int]:
    """Pids service_check saw that belong to a protected process: root's port owners outside the service's own units
    and pid file tree (dbus-broker, systemd-resolved, whatever their name), the port owners the policy's
    protected_processes name, and the service's own processes when the service itself is protected (sshd's listener
    in an ssh incident)."""
    pids = set(context.root_pids - context.service_pids)
    pids |= {pid for pid, name in context.port_owners.items() if name in policy.protected_processes}
    own = {context.service, context.init_service, context.process} - {None}
    if own & (policy.protected_processes | policy.protected_services):
        pids |= context.service_pids
    return frozenset(pids)


def own_units(context: PolicyContext) -> frozenset[str]:
    """The units of the incident, without ``.service``: its init service, the unit service_check found running it
    under every name systemd knows it by (its aliases: redis for redis-server), and the instances of the PostgreSQL
    clusters it declares (``postgresql@15-main``). Never another instance of a template: ``postgresql@14-main`` is
    another cluster, another incident."""
    if context.init_service is None:
        return frozenset()
    clusters = {f"{context.init_service}@{version}-{name}" for version, name in context.pg_clusters}
    return frozenset({context.init_service, *([context.unit] if context.unit else []), *context.unit_names, *clusters})


def unit_name(arg: str) -> str:
    return arg[:-len(".service")] if arg.endswith(".service") else arg


def own_unit(arg: str, context: PolicyContext) -> bool:
    name = unit_name(arg)
    return ("@" not in name or bool(_UNIT_INSTANCE.match(arg))) and name in own_units(context)


def _own_pids(context: PolicyContext) -> frozenset[int]:
    """The service's own processes: those of its units or pid file tree, and the port owners on its port that run its
    program outside every service's unit (an orphaned server its init script lost), but never a process of another
    service, nor one that only carries its name. Signalling them stops the service."""
    return (context.service_pids | context.lost_pids) - set(context.other_service_pids)


def _squatters(context: PolicyContext) -> frozenset[int]:
    """The port owners that are no service's processes: neither the incident's own nor another service's (its systemd
    unit's, or another declared service's)."""
    return frozenset(context.port_owners) - _own_pids(context) - set(context.other_service_pids)


def _pid_placeholder(pids: Callable[[PolicyContext, PolicyView], Iterable[int]]) -> Callable[[str, str, PolicyContext, PolicyView], bool]:
    def match(arg: str, letters: str, context: PolicyContext, policy: PolicyView) -> bool:
        if not is_canonical_int(arg) or int(arg) <= 1:
            return False
        pid = int(arg)
        return pid in set(pids(context, policy)) and pid not in _protected_pids(context, policy)
    return match


def _path_placeholder(accept: Callable[[str, PolicyContext, PolicyView], bool]) -> Callable[[str, str, PolicyContext, PolicyView], bool]:
    """A path that has one canonical form, none of whose readings is a secret, accepted by ``accept``."""
    def match(arg: str, letters: str, context: PolicyContext, policy: PolicyView) -> bool:
        path = policy.paths.canonical(arg)
        return path is not None and not policy.is_secret(arg) and accept(path, context, policy)
    return match


def _own_dirs(directories: Iterable[str], policy: PolicyView) -> Iterator[str]:
    """The service's directories that are its own: never a shared system directory such as /var/log
    (a declared /var/log/auth.log does not make /var/log the service's), nor one with no canonical form."""
    for directory in directories:
        path = policy.paths.canonical(directory)
        if path is not None and not policy.is_protected(path):
            yield path


def _service_dir(path: str, context: PolicyContext, policy: PolicyView) -> bool:
    return not policy.is_protected(path) and any(under(path, d) for d in _own_dirs(context.service_dirs, policy))


def _service_file(path: str, context: PolicyContext, policy: PolicyView) -> bool:
    return not policy.is_protected(path) and any(path.startswith(d + "/") for d in _own_dirs(context.service_dirs, policy))


def _service_log_file(path: str, context: PolicyContext, policy: PolicyView) -> bool:
    return not policy.is_protected(path) and any(path.startswith(d + "/") for d in _own_dirs(context.log_dirs, policy))


def _runtime_dir(path: str, context: PolicyContext, policy: PolicyView) -> bool:
    names = {context.service, context.init_service} - {None}
    return any(under(path, f"/run/{name}") for name in names)


def _service_url(arg: str, letters: str, context: PolicyContext, policy: PolicyView) -> bool:
    match = _LOOPBACK_URL.match(arg)
    return match is not None and url_port(match) in context.http_ports


def _service_data(arg: str, letters: str, context: PolicyContext, policy: PolicyView) -> bool:
    """A path in one of the incident's own data directories (in a data area: /var/lib/NAME, a declared path there),
    secrets included, for its size alone; never a dot file in it (an account's credentials, keys and histories)."""
    path = policy.paths.canonical(arg)
    if path is None or policy.is_protected(path):
        return False
    for directory in _own_dirs(context.service_dirs, policy):
        if _holds_data(directory) and under(path, directory):
            return not any(part.startswith(".") for part in path[len(directory):].split("/"))
    return False


def _probe_host(arg: str, letters: str, context: PolicyContext, policy: PolicyView) -> bool:
    return arg in LOOPBACK_HOSTS or arg in context.probe_hosts


def _readable(path: str, context: PolicyContext, policy: PolicyView) -> bool:
    return True


def _holds_data(directory: str) -> bool:
    """A directory of the service's data (its state, caches, what it stores): dumps, write-ahead logs and core files,
    printed, are what the service keeps; a read names its declared files there, never the rest."""
    return any(under(directory, area) for area in DATA_AREAS)


def _incident_file(path: str, context: PolicyContext, policy: PolicyView) -> bool:
    """A file a read of this incident may print: system state, or the service's own (below its own directories but
    those of its data, or its configuration directory, or one of its own files), where no link its account planted
    could lead the read (run as root) elsewhere."""
    if policy.is_system_read(path):
        return True
    return _own_file(path, context, policy) and not _may_be_a_planted_link(path, context, policy)


def _may_be_a_planted_link(path: str, context: PolicyContext, policy: PolicyView) -> bool:
    """Whether ``path`` lies in a directory service_check saw owned by another account than root, which could have
    put a link there, and service_check did not see the path itself as a file (a declared log it looked at). A
    directory of the service's own (its run, log and declared directories) whose owner the host did not report counts
    as its account's: that is whose such directories are, and the controller does not take root's on its own word."""
    owners = seen_owners(context, policy)
    services = [*_own_dirs(context.service_dirs, policy), *_own_dirs(context.log_dirs, policy),
                *(f"/run/{name}" for name in {context.service, context.init_service} - {None})]
    parent = posixpath.dirname(path)
    while parent != "/":
        owner = owners.get(parent) or ("(unknown)" if any(under(parent, directory) for directory in services) else "root")
        if owner != "root":
            return owners.get(path) in (None, "(link)")
        parent = posixpath.dirname(parent)
    return False


def _own_file(path: str, context: PolicyContext, policy: PolicyView) -> bool:
    """Below the service's configuration directory or its own directories but those of its data, a state file of its
    own processes in /proc, or one of its own files (declared, its unit's, named for it, its packages' in /etc)."""
    names = {context.service, context.init_service} - {None}
    configuration = [policy.paths.canonical(f"/etc/{name}") for name in names]
    if any(directory and path.startswith(directory + "/") for directory in configuration):
        return True
    if any(under(path, directory) for directory in _own_dirs(context.service_dirs, policy) if not _holds_data(directory)):
        return True
    process_file = _PROCESS_STATE_FILE.match(path)
    if process_file and int(process_file.group(1)) in _own_pids(context):
        return True
    return path in {policy.paths.canonical(own) for own in (*context.own_files, *context.log_files, context.stale_pidfile or "")}


def seen_owners(context: PolicyContext, policy: PolicyView) -> dict[str, str]:
    """Who service_check saw owning each component on the way to the declared paths, by canonical path."""
    return {policy.paths.canonical(seen) or seen: owner for seen, owner in context.path_owners.items()}


PLACEHOLDERS: dict[str, Callable[[str, str, PolicyContext, PolicyView], bool]] = {
    "init_service": lambda arg, letters, context, policy: context.init_service is not None and arg == context.init_service,
    "process": lambda arg, letters, context, policy: context.process is not None and arg in (context.process, context.process[:15]),
    "port_owner_pid": _pid_placeholder(lambda c, p: _squatters(c)),
    "other_service_pid": _pid_placeholder(lambda c, p: set(c.other_service_pids)),
    "service_pid": _pid_placeholder(lambda c, p: _own_pids(c)),
    "protected_pid": lambda arg, letters, context, policy: is_canonical_int(arg.lstrip("-"))
    and int(arg.lstrip("-")) in _protected_pids(context, policy),
    "port": lambda arg, letters, context, policy: is_canonical_int(arg) and int(arg) in context.ports,
    "stale_pidfile": _path_placeholder(lambda path, context, policy: context.stale_pidfile is not None
                                       and path == policy.paths.canonical(context.stale_pidfile)),
    "stale_socket": _path_placeholder(lambda path, context, policy: path in {policy.paths.canonical(p) for p in context.stale_sockets}),
    "stale_lock": _path_placeholder(lambda path, context, policy: path in {policy.paths.canonical(p) for p in context.stale_locks}),
    "log_file": _path_placeholder(lambda path, context, policy: path in {policy.paths.canonical(log) for log in context.log_files}),
    "service_dir": _path_placeholder(_service_dir),
    "service_file": _path_placeholder(_service_file),
    "service_log_file": _path_placeholder(_service_log_file),
    "rotated_log": _path_placeholder(lambda path, context, policy: _service_log_file(path, context, policy) and bool(_ROTATED_LOG.search(path))),
    "runtime_dir": _path_placeholder(_runtime_dir),
    "package_path": _path_placeholder(lambda path, context, policy: policy.package_path(path, context) is not None),
    "cached_package": _path_placeholder(lambda path, context, policy: path in {policy.paths.canonical(p) for p in context.cached_packages}),
    "readable_file": _path_placeholder(_readable),
    "incident_file": _path_placeholder(_incident_file),
    "unit": lambda arg, letters, context, policy: own_unit(arg, context),
    "signed_size": lambda arg, letters, context, policy: bool(_SIGNED_SIZE.match(arg)),
    "text": lambda arg, letters, context, policy: True,
    "count": lambda arg, letters, context, policy: is_canonical_int(arg) and 1 <= int(arg) <= 100_000,
    "few": lambda arg, letters, context, policy: is_canonical_int(arg) and 1 <= int(arg) <= 10,
    "signed_count": lambda arg, letters, context, policy: is_canonical_int(arg.lstrip("+-")) and len(arg) - len(arg.lstrip("+-")) <= 1,
    "flags": lambda arg, letters, context, policy: len(arg) > 1 and arg[0] == "-" and set(arg[1:]) <= set(letters),
    "word": lambda arg, letters, context, policy: bool(_WORD.match(arg)),
    "name": lambda arg, letters, context, policy: bool(_NAME.match(arg)),
    "glob": lambda arg, letters, context, policy: bool(_GLOB.match(arg)),
    "sed_print": lambda arg, letters, context, policy: bool(_SED_PRINT.match(arg)),
    "curl_write_out": lambda arg, letters, context, policy: bool(_CURL_WRITE_OUT.match(arg)),
    "unit_properties": lambda arg, letters, context, policy: set(arg.split(",")) <= UNIT_PROPERTIES,
    "service_data": _service_data,
    "service_url": _service_url,
    "pg_version": lambda arg, letters, context, policy: arg in {version for version, _name in context.pg_clusters},
    "pg_cluster": lambda arg, letters, context, policy: arg in {name for _version, name in context.pg_clusters},
    "probe_host": _probe_host,
    "secret_path": lambda arg, letters, context, policy: policy.is_secret(arg),
    "protected_path": lambda arg, letters, context, policy: policy.is_protected(arg),
    "protected_process": lambda arg, letters, context, policy: arg in policy.protected_processes,
    "protected_service": lambda arg, letters, context, policy: unit_name(arg) in policy.protected_services,
}
PLACEHOLDERS_WITH_LETTERS = frozenset({"flags"})
