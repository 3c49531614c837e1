"""Running one step the executor decided to run: an argv without a shell (as root or as the calling account, stopped
whole at its timeout, its output capped and redacted), a signal sent through a pidfd to the processes judged, an
ownership, mode or directory repair done without following links, a restore of the last known good configuration;
and the check that refuses a read as root whose path another account than root could redirect."""

from __future__ import annotations

import contextlib
import grp
import json
import os
import pwd
import signal
import stat
import subprocess

from ansible_collections.sentinel.heal.plugins.module_utils._configuration_tests import configuration_test
from ansible_collections.sentinel.heal.plugins.module_utils._guard.judge import split_options
from ansible_collections.sentinel.heal.plugins.module_utils._guard.redact import redact
from ansible_collections.sentinel.heal.plugins.module_utils._host import nofollow as _nofollow
from ansible_collections.sentinel.heal.plugins.module_utils._host.known_good import restore_step

MAX_OUTPUT_BYTES = 16384
SAFE_PATH = "/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin"
# what sudo passes on when the controller's side goes away (the job killed, its timeout, the session hung up)
_STOP_SIGNALS = (signal.SIGTERM, signal.SIGHUP, signal.SIGINT)


def run_argv(argv, become, timeout):
    """Run the argv without a shell, as root when the rule says so and as the calling account otherwise. The step and
    what it starts in its process group are stopped whole at the timeout or when the executor is told to stop (the
    controller's job was killed, its timeout ran out), as sudo stops a command run directly."""
    demote = None if become else _as_caller()
    try:
        child = subprocess.Popen(list(argv), stdin=subprocess.DEVNULL, stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                                 env=dict(PATH=SAFE_PATH, LANG="C.UTF-8"), cwd="/", preexec_fn=demote, start_new_session=True)
    except OSError as exc:
        return dict(rc=127, stdout="", stderr="cannot run %s: %s" % (argv[0], exc.strerror))

    def stop(signum, _frame):
        _kill_group(child.pid)
    for signum in _STOP_SIGNALS:
        signal.signal(signum, stop)
    try:
        stdout, stderr = child.communicate(timeout=timeout)
    except subprocess.TimeoutExpired:
        _kill_group(child.pid)
        child.communicate()
        return dict(rc=124, stdout="", stderr="killed on the host at its timeout of %d s" % timeout)
    # redacted here, before the answer leaves the host: a unit's Environment= values, tokens, keys
    return dict(rc=child.returncode, stdout=redact(output_text(stdout)), stderr=redact(output_text(stderr)))


# programs that read names and metadata, never a file's content: through an entry a service account owns (the service's
# own directories, where a person looks first) they run, and a link on the way is still refused
METADATA_READERS = frozenset(("ls", "stat", "namei", "du"))


def redirectable_operand(args, metadata_only=False):
    """Why a read run as root could be led elsewhere than the path it names, or None. The program a read runs (cat,
    tail, grep) opens its operands itself and follows every link on the way, so such a read is refused, never run on a
    path another account than root could change: one whose existing components include a symbolic link, an entry not
    root's, or a directory a non-root group or everyone may write (without the sticky bit). Each argument is read as a
    path, as the program may (a relative one from /, where steps run; the value of --opt=VALUE too): a component that
    does not exist ends the walk, having nothing to follow. The service's own logs still come with service_check, which
    reads them without following a link. A read of names and metadata only (``metadata_only``) may pass entries an
    account owns: swapped for a link at that moment, it would show another entry's metadata, never its content."""
    for arg in args:
        for value in (arg, arg.partition("=")[2]) if arg.startswith("--") else (arg,):
            reason = _redirectable_path(value, metadata_only)
            if reason:
                return ("%r is read as root and could be led elsewhere: %s; refused (service_check reads the service's logs "
                        "without following links)" % (arg, reason))
    return None


def _redirectable_path(path, metadata_only=False):
    current = ""
    for part in path.split("/"):
        if part in ("", "."):
            continue
        current += "/" + part
        try:
            info = os.lstat(current)
        except OSError:
            return None
        if stat.S_ISLNK(info.st_mode):
            return "%s is a symbolic link" % current
        if info.st_uid != 0 and not metadata_only:
            return "%s is not root's (uid %d)" % (current, info.st_uid)
        others_write = info.st_mode & stat.S_IWOTH or (info.st_mode & stat.S_IWGRP and info.st_gid != 0)
        if stat.S_ISDIR(info.st_mode) and others_write and not info.st_mode & stat.S_ISVTX:
            return "%s may be written by others than root" % current
    return None


def signal_processes(argv, judged_again):
    """kill [-SIGNAL] PID..., sent by the executor itself and only to the processes it judged: a pidfd is opened for
    each pid first, then ``judged_again()`` (the step judged again in the context read after that, None when it holds,
    else why not) says whether each pid is still what the step was allowed for, and the signal goes through the pidfd.
    A pid whose process ended and was taken by another between the judgement and the signal is never signalled: the
    pidfd names the process, not the number."""
    parsed = _kill_operands(argv)
    if parsed is None:
        return dict(refused=True, rule="signal-by-pidfd", reason="%r: the executor sends signals itself as kill [-SIGNAL] PID..., "
                    "with a signal by name or number and pids only" % " ".join(argv))
    signum, pids = parsed
    opened = []
    try:
        for pid in pids:
            try:
                opened.append(os.pidfd_open(pid))
            except ProcessLookupError:
                return dict(refused=True, rule="process-gone", reason="process %d has ended since it was judged: nothing was signalled" % pid)
        changed = judged_again()
        if changed:
            return dict(refused=True, rule="process-changed", reason="judged again with each pid held: %s; nothing was signalled" % changed)
        ended = []
        for pid, pidfd in zip(pids, opened):
            try:
                signal.pidfd_send_signal(pidfd, signum)
            except ProcessLookupError:
                ended.append(pid)
    finally:
        for pidfd in opened:
            os.close(pidfd)
    said = "".join("process %d had ended: not signalled\n" % pid for pid in ended)
    return dict(rc=1 if ended else 0, stdout="", stderr=said)


def _kill_operands(argv):
    """(signal, pids) of kill [-SIGNAL] PID... (SIGTERM when it names none), or None for anything else."""
    args = list(argv[1:])
    signum = signal.SIGTERM
    if args and args[0].startswith("-"):
        name = args.pop(0)[1:].upper()
        try:
            signum = signal.Signals(int(name)) if name.isdigit() else signal.Signals[name if name.startswith("SIG") else "SIG" + name]
        except (KeyError, ValueError):
            return None
    if not args or not all(arg.isdigit() and int(arg) > 0 for arg in args):
        return None
    return signum, [int(arg) for arg in args]


def _kill_group(pid):
    with contextlib.suppress(OSError):  # gone already
        os.killpg(pid, signal.SIGKILL)


def _as_caller():
    uid, gid = int(os.environ.get("SUDO_UID", "65534")), int(os.environ.get("SUDO_GID", "65534"))

    def demote():
        os.setgroups([])
        os.setgid(gid)
        os.setuid(uid)
    return demote


def output_text(data):
    return data[:MAX_OUTPUT_BYTES].decode("utf-8", "replace")


def repair(rule, argv, context, policy):
    """Ownership, mode and directory repairs, done here without following a link at any component: what the judge
    allowed on the paths it saw is what changes, whatever was swapped in since."""
    operands, options = split_options(argv[1:], rule.options or {}, context, policy)
    try:
        if rule.restores == "ownership":
            owner, _colon, group = operands[0].partition(":")
            uid, gid = pwd.getpwnam(owner).pw_uid, grp.getgrnam(group).gr_gid if group else -1
            notes = [_nofollow.change_owner(path, uid, gid, recursive="-R" in options) for path in operands[1:]]
        elif rule.restores == "mode":
            notes = [_nofollow.change_mode(path, int(operands[0], 8)) for path in operands[1:]]
        else:
            uid, gid = pwd.getpwnam(options.get("-o") or "root").pw_uid, grp.getgrnam(options.get("-g") or "root").gr_gid
            notes = [_nofollow.make_directory(path, uid, gid, int(options.get("-m") or "0755", 8)) for path in operands]
    except _nofollow.NoFollowRefused as exc:
        return dict(rc=1, stdout="", stderr=str(exc))
    except KeyError as exc:
        return dict(rc=1, stdout="", stderr="no such account or group: %s" % exc)
    return dict(rc=0, stdout=json.dumps(notes, sort_keys=True, default=str), stderr="")


def restore_known_good(spec, argv):
    """sentinel-heal-restore FILE SHA256, as the judge bound it to the incident's changed file and its kept copy: put
    back here, the current version kept aside, the service's configuration test run and the restore undone if it
    fails (:func:`restore_step`)."""
    return restore_step(spec["name"], argv[1], argv[2], test_argv=configuration_test(spec))
