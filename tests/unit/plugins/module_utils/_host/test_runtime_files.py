"""Pid files, Unix sockets and their lock files as a daemon leaves them (module_utils/_host/runtime_files.py): real
processes, sockets and files on this machine."""

from __future__ import annotations

import os
import socket
import subprocess
from pathlib import Path

import pytest
from local_llm import free_port
from probe_checks import bound_then_abandoned, check, declared

from ansible_collections.sentinel.heal.plugins.module_utils._host.runtime_files import read_socket


def test_a_dead_pid_in_the_pid_file_is_a_stale_pidfile(tmp_path: Path) -> None:
    dead = subprocess.Popen(["true"])
    dead.wait()
    pidfile = tmp_path / "svc.pid"
    pidfile.write_text(str(dead.pid))
    port = free_port()
    result = check(declared(name="svc", ports=[port], process="definitely-not-running", pidfile=str(pidfile)))
    failure = result["failures"][0]
    assert failure["failure_class"] == "stale_pidfile"
    assert failure["evidence"]["pidfile"] == {"path": str(pidfile), "exists": True, "pid": dead.pid, "alive": False, "process": None}
    assert f"names pid {dead.pid}, which is not running" in failure["summary"]
    assert "Connection refused" in failure["summary"]


def test_an_empty_pid_file_is_stale_and_says_so(tmp_path: Path) -> None:
    pidfile = tmp_path / "svc.pid"
    pidfile.write_text("")  # what an init script's `touch` leaves when the daemon never wrote its pid
    failure = check(declared(name="svc", process="definitely-not-running", pidfile=str(pidfile)))["failures"][0]
    assert failure["failure_class"] == "stale_pidfile"
    assert f"pid file {pidfile} holds no pid" in failure["summary"] and "None" not in failure["summary"]


def test_a_socket_nothing_has_bound_and_a_lock_naming_another_program_are_a_stale_socket(sockets_dir: Path) -> None:
    left_over, lock = sockets_dir / "svc.sock", sockets_dir / "svc.sock.lock"
    bound_then_abandoned(left_over)
    lock.write_text(f"{os.getpid()}\n/var/lib/svc\n")  # the pid was reused: it is this test's python now
    failure = check(declared(name="svc", process="definitely-not-running", sockets=[str(left_over)]))["failures"][0]
    assert failure["failure_class"] == "stale_socket"
    [info] = failure["evidence"]["sockets"]
    assert (info["exists"], info["socket"], info["bound"], info["stale"]) == (True, True, False, True)
    assert (info["lock"]["pid"], info["lock"]["alive"], info["lock"]["stale"]) == (os.getpid(), False, True)
    comm = Path("/proc/self/comm").read_text().strip()
    assert f"socket {left_over} is left over: no process has it bound" in failure["summary"]
    assert f"lock file {lock} names pid {os.getpid()}, which is {comm}, not the service" in failure["summary"]


def test_a_socket_a_live_process_has_bound_and_the_services_own_lock_are_not_stale(sockets_dir: Path) -> None:
    path = sockets_dir / "svc.sock"
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(path))
    listener.listen()
    try:
        comm = Path("/proc/self/comm").read_text().strip()
        Path(f"{path}.lock").write_text(f"{os.getpid()}\n")
        failure = check(declared(name="svc", ports=[free_port()], process=comm, sockets=[str(path), str(sockets_dir / "absent.sock")]))["failures"][0]
    finally:
        listener.close()
    assert failure["failure_class"] != "stale_socket"
    bound, absent = failure["evidence"]["sockets"]
    assert (bound["bound"], bound["stale"], bound["lock"]["alive"], bound["lock"]["stale"]) == (True, False, True, False)
    assert (absent["exists"], absent["stale"], absent["lock"]["exists"], absent["lock"]["stale"]) == (False, False, False, False)
    assert "left over" not in failure["summary"] and "lock file" not in failure["summary"]


@pytest.mark.parametrize("bound_through_the_link", [True, False])
def test_a_socket_bound_through_a_linked_directory_is_bound_where_the_kernel_put_it(sockets_dir: Path, bound_through_the_link: bool) -> None:
    """PostgreSQL binds /var/run/postgresql/.s.PGSQL.5432 for a declared /run/postgresql/.s.PGSQL.5432 (/var/run is a
    link to /run): /proc/net/unix names the path the server gave, which is the declared one only where the kernel lands."""
    (sockets_dir / "real").mkdir()
    (sockets_dir / "link").symlink_to(sockets_dir / "real")
    bound_at, declared = (sockets_dir / "link" / "s.sock", sockets_dir / "real" / "s.sock")
    if not bound_through_the_link:
        bound_at, declared = declared, bound_at
    listener = socket.socket(socket.AF_UNIX)
    listener.bind(str(bound_at))
    listener.listen()
    try:
        info = read_socket(str(declared), "definitely-not-running")
    finally:
        listener.close()
    assert (info["bound"], info["stale"]) == (True, False)


def test_a_lock_naming_a_dead_pid_is_left_to_its_owner_and_a_socket_without_a_lock_is_in_the_way(sockets_dir: Path) -> None:
    """PostgreSQL killed: its lock names the dead postmaster, which its next start takes for its own remnant."""
    dead = subprocess.Popen(["true"])
    dead.wait()
    locked, unlocked = sockets_dir / "locked.sock", sockets_dir / "unlocked.sock"
    bound_then_abandoned(locked)
    Path(f"{locked}.lock").write_text(f"{dead.pid}\n")
    failure = check(declared(name="svc", process="definitely-not-running", sockets=[str(locked)]))["failures"][0]
    assert failure["failure_class"] == "not_running"
    [info] = failure["evidence"]["sockets"]
    assert (info["stale"], info["lock"]["stale"]) == (True, True)  # both named, and removable, should a plan want it
    assert f"lock file {locked}.lock names pid {dead.pid}, which is not running" in failure["summary"]
    Path(f"{locked}.lock").write_text("")  # a lock naming no pid: postgres will not start on it
    assert check(declared(name="svc", process="definitely-not-running", sockets=[str(locked)]))["failures"][0]["failure_class"] == "stale_socket"
    bound_then_abandoned(unlocked)
    assert check(declared(name="svc", process="definitely-not-running", sockets=[str(unlocked)]))["failures"][0]["failure_class"] == "stale_socket"


def test_a_regular_file_where_a_socket_is_declared_is_not_removable_as_stale(sockets_dir: Path) -> None:
    path = sockets_dir / "svc.sock"
    path.write_text("not a socket")
    failure = check(declared(name="svc", process="definitely-not-running", sockets=[str(path)]))["failures"][0]
    assert failure["failure_class"] == "not_running"
    assert failure["evidence"]["sockets"][0]["stale"] is False
