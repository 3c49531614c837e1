"""A real PostgreSQL server for tests and trials: Debian's PostgreSQL binaries, a cluster of its own in a temporary
directory, on a free local TCP port, with a database and a role with a password for sentinel.heal's memory.

PostgreSQL refuses to run as root, so the cluster belongs to the ``postgres`` user (``runuser -u postgres --`` when run
as root). It listens on 127.0.0.1 (and the addresses a test adds), trusts nobody (scram-sha-256 over TCP), and runs without fsync (a test cluster:
speed over durability). ``down`` stops it and removes its directory; nothing is left behind.

    python tests/postgres_server.py up [--port 5439] [--dir DIR]   # prints the memory URL (the password apart)
    python tests/postgres_server.py down [--dir DIR]

The tests' ``postgres`` fixture (tests/conftest.py) imports it (standard library only).
"""

from __future__ import annotations

import argparse
import glob
import os
import pwd
import secrets
import shutil
import socket
import subprocess
import sys
import tempfile
from dataclasses import dataclass
from pathlib import Path

DATABASE = "sentinel_heal"
ROLE = "sentinel"
DEFAULT_DIR = "/tmp/sentinel-heal-postgres"
READY_TIMEOUT = 60.0
# who started a cluster (a test session's pid): a directory whose starter is gone is an interrupted session's leftover
OWNER_FILE = "started-by"


class PostgresServerError(RuntimeError):
    """The server could not be found, started or stopped."""


def binaries() -> Path:
    """The newest installed PostgreSQL's bin directory (Debian's /usr/lib/postgresql/N/bin)."""
    found = sorted(glob.glob("/usr/lib/postgresql/*/bin/postgres"), key=lambda path: int(Path(path).parts[-3]))
    if not found:
        raise PostgresServerError("PostgreSQL is not installed (no /usr/lib/postgresql/*/bin/postgres): apt-get install postgresql, "
                                  "or run `make setup`")
    return Path(found[-1]).parent


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return int(probe.getsockname()[1])


@dataclass
class PostgresServer:
    """One cluster in ``directory`` (its data in ``data/``, its socket and log beside it) on ``port``."""

    directory: Path
    port: int
    password: str = ""
    # more addresses to listen on than 127.0.0.1, and the networks (CIDR) allowed to connect from them with the password:
    # a client in a container reaches the server over a bridge, not over the loopback
    addresses: tuple[str, ...] = ()
    clients: tuple[str, ...] = ()

    @property
    def data(self) -> Path:
        return self.directory / "data"

    @property
    def log(self) -> Path:
        return self.directory / "server.log"

    @property
    def url(self) -> str:
        """The memory URL (autoheal_memory_url) without the password: it goes apart, as an AWX credential gives it."""
        return f"postgresql://{ROLE}@127.0.0.1:{self.port}/{DATABASE}"

    @property
    def url_with_password(self) -> str:
        return f"postgresql://{ROLE}:{self.password}@127.0.0.1:{self.port}/{DATABASE}"

    def up(self, create: bool = True) -> PostgresServer:
        """initdb, start and (unless ``create`` is off: a bare server, as a database administrator finds one) create the
        role and the database; returns once the server takes connections."""
        if os.geteuid() == 0 and _postgres_user() is None:
            raise PostgresServerError("PostgreSQL refuses to run as root and there is no postgres user: apt-get install postgresql")
        self.password = self.password or secrets.token_urlsafe(18)
        self.directory.mkdir(mode=0o700, parents=True, exist_ok=False)
        (self.directory / OWNER_FILE).write_text(str(os.getpid()))
        _give_to_postgres(self.directory)
        bin_dir = binaries()
        password_file = self.directory / "pw"
        password_file.write_text(self.password + "\n")
        _give_to_postgres(password_file)
        try:
            self._as_postgres(bin_dir / "initdb", "-D", str(self.data), "-U", "postgres", "-E", "UTF8", "--locale", "C.UTF-8",
                              "--auth-local", "peer" if os.geteuid() == 0 else "trust", "--auth-host", "scram-sha-256",
                              f"--pwfile={password_file}", timeout=120)
        finally:
            password_file.unlink()
        if self.clients:
            with (self.data / "pg_hba.conf").open("a", encoding="utf-8") as hba:
                hba.writelines(f"host all all {network} scram-sha-256\n" for network in self.clients)
        listen = ",".join(("127.0.0.1", *self.addresses))
        options = (f"-c listen_addresses={listen} -c port={self.port} -c unix_socket_directories={self.directory} "
                   "-c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=100")
        self._as_postgres(bin_dir / "pg_ctl", "-D", str(self.data), "-l", str(self.log), "-o", options, "-w",
                          "-t", str(int(READY_TIMEOUT)), "start", timeout=READY_TIMEOUT + 10)
        if create:
            self.psql(f"CREATE ROLE {ROLE} LOGIN PASSWORD '{self.password}'")
            self.psql(f"CREATE DATABASE {DATABASE} OWNER {ROLE}")
        return self

    def psql(self, sql: str, database: str = "postgres") -> str:
        """Run SQL as the cluster's superuser, over its Unix socket."""
        proc = self._as_postgres(binaries() / "psql", "-X", "-q", "-A", "-t", "-v", "ON_ERROR_STOP=1", "-h", str(self.directory),
                                 "-p", str(self.port), "-d", database, "-c", sql, timeout=60)
        return proc.stdout

    def running(self) -> bool:
        return (self.data / "postmaster.pid").exists() and _pid_alive(_postmaster_pid(self.data))

    def down(self) -> None:
        """Stop the server (fast, then immediate) and remove its directory."""
        if self.running():
            try:
                self._as_postgres(binaries() / "pg_ctl", "-D", str(self.data), "-m", "fast", "-w", "-t", "30", "stop", timeout=40)
            except PostgresServerError:
                self._as_postgres(binaries() / "pg_ctl", "-D", str(self.data), "-m", "immediate", "-w", "-t", "30", "stop", timeout=40)
        shutil.rmtree(self.directory, ignore_errors=True)

    def _as_postgres(self, program: Path, *args: str, timeout: float) -> subprocess.CompletedProcess[str]:
        argv = [str(program), *args]
        if os.geteuid() == 0:
            argv = ["runuser", "-u", "postgres", "--", *argv]
        proc = subprocess.run(argv, capture_output=True, text=True, timeout=timeout, check=False, cwd="/")
        if proc.returncode != 0:
            log = self.log.read_text(errors="replace")[-2000:] if self.log.exists() else ""
            raise PostgresServerError(f"{' '.join(argv[:6])} ... failed (rc {proc.returncode}): {proc.stderr.strip()}\n{log}")
        return proc


def new_server(parent: str | None = None, addresses: tuple[str, ...] = (), clients: tuple[str, ...] = ()) -> PostgresServer:
    """A server in a fresh directory (under /tmp: the postgres user cannot enter root's pytest directories)."""
    remove_leftovers(parent)
    directory = Path(tempfile.mkdtemp(prefix="sentinel-heal-pg-", dir=parent))
    directory.rmdir()  # up() creates it, owned by postgres
    return PostgresServer(directory=directory, port=free_port(), addresses=addresses, clients=clients)


def remove_leftovers(parent: str | None = None) -> None:
    """Clusters of test sessions that were killed before they could stop theirs: stopped and removed."""
    for candidate in Path(parent or tempfile.gettempdir()).glob("sentinel-heal-pg-*"):
        owner = candidate / OWNER_FILE
        try:
            starter = int(owner.read_text())
        except (OSError, ValueError):
            continue  # being set up right now, or not one of ours
        if not _pid_alive(starter):
            PostgresServer(directory=candidate, port=0).down()


def _postgres_user() -> pwd.struct_passwd | None:
    try:
        return pwd.getpwnam("postgres")
    except KeyError:
        return None


def _give_to_postgres(path: Path) -> None:
    user = _postgres_user()
    if os.geteuid() == 0 and user is not None:
        os.chown(path, user.pw_uid, user.pw_gid)


def _postmaster_pid(data: Path) -> int:
    try:
        return int((data / "postmaster.pid").read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 0


def _pid_alive(pid: int) -> bool:
    if pid <= 0:
        return False
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("action", choices=["up", "down"])
    parser.add_argument("--port", type=int, default=0, help="TCP port on 127.0.0.1 (default: a free one)")
    parser.add_argument("--dir", default=DEFAULT_DIR, help=f"the cluster's directory (default {DEFAULT_DIR})")
    args = parser.parse_args(argv)
    server = PostgresServer(directory=Path(args.dir), port=args.port or free_port())
    try:
        if args.action == "down":
            server.down()
            return 0
        if server.directory.exists():
            print(f"{server.directory} exists: run `python tests/postgres_server.py down --dir {server.directory}` first", file=sys.stderr)
            return 1
        server.up()
    except PostgresServerError as exc:
        print(exc, file=sys.stderr)
        return 1
    # the starter of a cluster started by hand is init: it is never taken for an interrupted session's leftover
    (server.directory / OWNER_FILE).write_text("1")
    print(server.url)
    print(f"password: {server.password}")
    return 0


if __name__ == "__main__":
    sys.exit(main())


def bridged_server() -> PostgresServer:
    """A server on the lab bridge's address (tests/lab), for containers: jobs in the execution environment over podman's
    network, and execution nodes on the host's (tests/ee/stream.py), which reach it from that address itself. Its URL for
    them is ``bridged_url``. Start it with ``up()``."""
    import lab_hosts  # tests/lab, on the path of whoever runs the lab

    subnet = subprocess.run(["podman", "network", "inspect", "podman", "--format", "{{range .Subnets}}{{.Subnet}}{{end}}"],
                            check=True, capture_output=True, text=True).stdout.strip()
    return new_server(addresses=(lab_hosts.GATEWAY,), clients=(subnet, f"{lab_hosts.GATEWAY}/32"))


def bridged_url(server: PostgresServer) -> str:
    """The server's URL as a container reaches it (``bridged_server``)."""
    import lab_hosts

    return server.url.replace("@127.0.0.1:", f"@{lab_hosts.GATEWAY}:")
