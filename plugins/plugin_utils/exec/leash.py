"""The leash of a run: ansible-runner starts ansible-playbook in a session of its own, which outlives the process that
started it; a small watcher in yet another session kills that session's whole tree when told to, or when the process
that started the run dies (a job killed with SIGKILL), so no step of a dead job runs on."""

from __future__ import annotations

import subprocess
import sys
from typing import Any, Mapping


class Leash:
    """A watcher in a session of its own, told the pid of the run's ansible-playbook: told ``kill``, or when the pipe
    from this process closes without a word (this process died), it kills that process and every process under it.
    Ansible's workers start sessions of their own, so neither a process group nor a session holds them all: the
    watcher walks the tree, stopping each process it finds so none forks away, then kills them."""

    _WATCH = """
import os, signal, sys
def tree(root):
    children = {}
    for name in os.listdir('/proc'):
        try:
            children.setdefault(int(open('/proc/' + name + '/stat').read().rsplit(')', 1)[1].split()[1]), []).append(int(name))
        except (OSError, ValueError, IndexError):
            pass
    found, todo = [], [root]
    while todo:
        pid = todo.pop()
        found.append(pid)
        todo.extend(children.get(pid, []))
    return found
def kill(root, spare=()):
    seen = set(spare)
    for _round in range(3):
        for pid in set(tree(root)) - seen:
            seen.add(pid)
            try:
                os.kill(pid, signal.SIGSTOP)
            except OSError:
                pass
    for pid in seen - set(spare):
        try:
            os.kill(pid, signal.SIGKILL)
        except OSError:
            pass
root, starter = 0, os.getppid()
for line in sys.stdin:
    word = line.strip()
    if word == 'done':
        sys.exit(0)
    if word == 'kill':
        # before the first event the run's pid is not known yet: every process the starter started but this one
        kill(root) if root else kill(starter, spare=(starter, os.getpid()))
        root = 0
        print('killed', flush=True)
    else:
        root = int(word)
if root:
    kill(root)
"""

    def __init__(self) -> None:
        self._pid = 0
        self._watcher = subprocess.Popen(  # pylint: disable=consider-using-with
            [sys.executable, "-I", "-S", "-c", self._WATCH], stdin=subprocess.PIPE, stdout=subprocess.PIPE,
            stderr=subprocess.DEVNULL, start_new_session=True, text=True,
        )

    def hold(self, event: Mapping[str, Any]) -> Mapping[str, Any]:
        """Learn the pid of the run's ansible-playbook from its first event; the event."""
        if not self._pid and event.get("pid"):
            self.watch(int(event["pid"]))
        return event

    def watch(self, pid: int) -> None:
        """The process whose tree dies with this one from now on (0: none, once it ended: its pid may be reused)."""
        self._pid = pid
        self._say(f"{pid}\n")

    def kill(self) -> None:
        """Kill the run's tree now, and return once it is done (before ansible-runner kills ansible-playbook alone, which
        would orphan its workers out of the tree's reach)."""
        self._say("kill\n")
        if self._watcher.stdout is not None:
            self._watcher.stdout.readline()

    def release(self) -> None:
        self._say("done\n")
        for stream in (self._watcher.stdin, self._watcher.stdout):
            if stream is not None:
                stream.close()
        self._watcher.wait()

    def _say(self, line: str) -> None:
        if self._watcher.stdin is None:
            return
        try:
            self._watcher.stdin.write(line)
            self._watcher.stdin.flush()
        except OSError:
            pass
