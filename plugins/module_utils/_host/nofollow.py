# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Changing owners and modes, making directories and removing files as root on the target host, such that no symbolic
link can carry the change outside the service's tree (standard library only, Linux).

The guard lets a repair reach a path only where it judged that no service account could redirect it, but it judged
from what service_check saw earlier: between that check and the step, an account that owns a directory on the way can
put a symbolic link in place of what it holds, and a ``chown`` or ``install -d`` run by root would follow it to
wherever it leads (/etc, say). Here a path is walked from ``/`` one directory at a time, each opened below the one
before without following a link (O_NOFOLLOW), and the step acts on the last component through that open parent: a link
met on the way is refused, naming it, and one put in place of a directory after it was opened cannot move what is
already open. Files are read the same way, and a file of more than one name (a hard link an account made to one it
may not read) is neither read nor given an owner.
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat

# opens the directory itself, never what a symbolic link in its place leads to (refused with ENOTDIR or ELOOP)
_DIRECTORY_FLAGS = os.O_RDONLY | os.O_DIRECTORY | os.O_NOFOLLOW | os.O_CLOEXEC
# what install -d gives the directories it makes on the way to the one asked for
_ANCESTOR_UID, _ANCESTOR_GID, _ANCESTOR_MODE = 0, 0, 0o755
# a directory is made open to root alone until its owner and mode are the ones asked for
_PRIVATE_MODE = 0o700
# a recursive walk holds a descriptor per level: a tree nested deeper (an account can make one) is refused, not a crash
MAX_DEPTH = 256
LINK_REFUSED = "is a symbolic link: refused to follow it"
# a directory when looked at again after the kernel said it was none: something was put in its place and taken away
REPLACED_REFUSED = "was replaced while it was being opened: refused"
HARD_LINK_REFUSED = "is a file of more than one name (a hard link): refused"


class NoFollowRefused(Exception):
    """A step not taken, or in a recursive walk not finished: the ``path`` asked for, the ``component`` where it stopped
    (``path`` itself, a directory on the way or an entry below it) and the ``reason``."""

    def __init__(self, path, component, reason):
        self.path, self.component, self.reason = path, component, reason
        # quoted: the names below a service's directories are its account's to choose, a newline in one included
        where = "%r %s" % (component, reason)
        super().__init__(where if component == path else "%r: %s" % (path, where))


def change_owner(path, uid, gid, recursive=False):
    """chown -h, or with ``recursive`` chown -R: ``uid`` and ``gid`` (-1 keeps either) on ``path``, a symbolic link
    changed itself, never what it leads to. The recursive walk goes physically through the directories it has open and
    never into another filesystem: an entry on another device than ``path`` is neither entered nor changed. Returns how
    many entries ``changed``, how many were already ``unchanged`` and the paths ``skipped`` on other filesystems."""
    tally = dict(changed=0, unchanged=0, skipped=[])
    with _pinned_parent(path) as (parent_fd, name):
        with _refusing(path, path, "read"):
            info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        if recursive and stat.S_ISDIR(info.st_mode):
            with _directory(parent_fd, name, path, path) as fd:
                _change_tree(fd, path, uid, gid, info.st_dev, path, tally, 0)
        else:
            _change_entry(parent_fd, name, info, uid, gid, tally, path, path)
    return tally


def change_mode(path, mode):
    """chmod for a directory itself (the policy restores modes on package directories only): ``mode`` on ``path``, which
    must be a real directory; a symbolic link or anything else is refused. Returns whether the mode changed."""
    with _pinned_parent(path) as pinned:
        parent_fd, name = pinned
        with _directory(parent_fd, name, path, path) as fd, _refusing(path, path, "changed"):
            changed = stat.S_IMODE(os.fstat(fd).st_mode) != mode
            os.fchmod(fd, mode)
    return changed


def make_directory(path, uid, gid, mode):
    """install -d -o -g -m: ``path`` a directory owned by ``uid``:``gid`` with exactly ``mode`` (whatever the umask),
    made when missing, its owner and mode set when it is a directory already; a symbolic link or anything else in its
    place is refused. The missing directories on the way are made root:root 0755, as install -d makes them. Returns
    the directories ``created`` (on the way too) and whether anything ``changed``."""
    created = []
    with _pinned_parent(path, created) as (parent_fd, name):
        if _made(parent_fd, name, path, path):
            created.append(path)
        with _directory(parent_fd, name, path, path) as fd:
            settled = _settle(fd, uid, gid, mode, path, path)
    return dict(created=created, changed=bool(created) or settled)


def remove_file(path):
    """rm -f for anything but a directory (refused): a symbolic link is removed itself. Returns whether something was
    removed: nothing where ``path`` should be is what was asked for; a directory missing on the way is refused."""
    with _pinned_parent(path) as (parent_fd, name), _refusing(path, path, "removed"):
        try:
            os.unlink(name, dir_fd=parent_fd)
        except FileNotFoundError:
            return False
    return True


def read_file(path, limit):
    """The bytes of the regular file ``path`` (at most ``limit``; more is refused), opened as :func:`open_file` does."""
    with open_file(path) as handle:
        data = handle.read(limit + 1)
    if len(data) > limit:
        raise NoFollowRefused(path, path, "is larger than %d bytes: refused" % limit)
    return data


@contextlib.contextmanager
def open_file(path):
    """The regular file ``path`` open for reading (binary), reached as every step here reaches a path: a link on the
    way or in its place is refused, and so is a file of more than one name (a hard link an account made in its own
    directory to a file it may not read, /etc/shadow, would be read by root as its own)."""
    with _pinned_parent(path) as pinned:
        parent_fd, name = pinned
        with _refusing(path, path, "read", parent_fd, name):
            fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=parent_fd)
    with os.fdopen(fd, "rb") as handle:
        info = os.fstat(handle.fileno())
        if not stat.S_ISREG(info.st_mode):
            raise NoFollowRefused(path, path, "is not a regular file: refused")
        if info.st_nlink > 1:
            raise NoFollowRefused(path, path, HARD_LINK_REFUSED)
        yield handle


def replace_file(path, data, over_link_as=None):
    """``path``, a regular file, replaced by ``data`` with its owner, group and mode, at once: written beside it in
    the directory opened on the way (never through a link) and renamed over it, so that a reader sees the old file
    or the new one, never a part. With ``over_link_as`` (the owner, group and mode :func:`replace_with_link` returned),
    the link in its place is what is replaced, never followed: the file it stood for comes back. Returns the old
    file's owner, group and mode."""
    with _pinned_parent(path) as (parent_fd, name):
        with _refusing(path, path, "read"):
            info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        if over_link_as is not None and stat.S_ISLNK(info.st_mode):
            owner = over_link_as
        elif stat.S_ISREG(info.st_mode):
            owner = dict(uid=info.st_uid, gid=info.st_gid, mode=stat.S_IMODE(info.st_mode))
        else:
            raise NoFollowRefused(path, path, LINK_REFUSED if stat.S_ISLNK(info.st_mode) else "is not a regular file: refused")
        temporary = ".%s.sentinel-heal-%d" % (name, os.getpid())
        with _refusing(path, path, "replaced"):
            fd = os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_EXCL | os.O_NOFOLLOW | os.O_CLOEXEC, 0o600, dir_fd=parent_fd)
            try:
                with os.fdopen(fd, "wb") as handle:
                    handle.write(data)
                    os.fchown(handle.fileno(), owner["uid"], owner["gid"])
                    os.fchmod(handle.fileno(), owner["mode"])
                    handle.flush()
                    os.fsync(handle.fileno())
                os.rename(temporary, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(temporary, dir_fd=parent_fd)
                raise
    return owner


def replace_with_link(path, text):
    """``path``, a regular file, replaced at once by a symbolic link that says ``text`` (as ln -sf would, but renamed
    over the file in the directory opened on the way, so that a reader sees the file or the link, never neither).
    Nothing is read or written through the link. Returns the file's owner, group and mode."""
    with _pinned_parent(path) as (parent_fd, name):
        with _refusing(path, path, "read"):
            info = os.stat(name, dir_fd=parent_fd, follow_symlinks=False)
        if not stat.S_ISREG(info.st_mode):
            raise NoFollowRefused(path, path, LINK_REFUSED if stat.S_ISLNK(info.st_mode) else "is not a regular file: refused")
        temporary = ".%s.sentinel-heal-%d" % (name, os.getpid())
        with _refusing(path, path, "replaced"):
            os.symlink(text, temporary, dir_fd=parent_fd)
            try:
                os.rename(temporary, name, src_dir_fd=parent_fd, dst_dir_fd=parent_fd)
            except OSError:
                with contextlib.suppress(OSError):
                    os.unlink(temporary, dir_fd=parent_fd)
                raise
    return dict(uid=info.st_uid, gid=info.st_gid, mode=stat.S_IMODE(info.st_mode))


@contextlib.contextmanager
def _pinned_parent(path, created=None):
    """(a descriptor of the directory that holds ``path``'s last component, that component's name): reached from / one
    directory at a time, each opened below the one before without following a link, so that whatever is put in place
    of a component later, the descriptor stays the directory it was. With ``created`` (a list), a directory missing on
    the way is made as install -d makes it and listed there; without it, refused."""
    names = _components(path)
    fd = _open_directory(None, "/", path, "/")
    try:
        for depth, name in enumerate(names[:-1], start=1):
            component = "/" + "/".join(names[:depth])
            made = created is not None and _made(fd, name, path, component)
            fd, parent_fd = _open_directory(fd, name, path, component), fd
            os.close(parent_fd)
            if made:
                created.append(component)
                _settle(fd, _ANCESTOR_UID, _ANCESTOR_GID, _ANCESTOR_MODE, path, component)
        yield fd, names[-1]
    finally:
        os.close(fd)


def _components(path):
    """The names on the way from / to ``path``. Only an absolute, normal path is walked: the guard judged paths in that
    form, and a .. would climb out of a directory already checked."""
    if not path.startswith("/"):
        raise NoFollowRefused(path, path, "is not an absolute path: refused")
    if path == "/":
        raise NoFollowRefused(path, path, "is the root directory: refused (a step acts on an entry of a directory)")
    names = path[1:].split("/")
    if "\0" in path or any(name in ("", ".", "..") for name in names):
        raise NoFollowRefused(path, path, "is not a normal path (an empty, . or .. component, a trailing / or a NUL byte): refused")
    return names


def _change_tree(fd, component, uid, gid, device, path, tally, depth):
    """chown -R of the open directory ``fd`` (``component``, ``depth`` levels below ``path``), itself first, entering
    only directories on ``device``."""
    if depth > MAX_DEPTH:
        raise NoFollowRefused(path, component, "is more than %d directories deep: refused" % MAX_DEPTH)
    with _refusing(path, component, "read"):
        info = os.fstat(fd)
        # read whole before going down: one descriptor open per level, not two
        with os.scandir(fd) as listing:
            entries = list(listing)
    _give_owner(info, uid, gid, tally, path, component, os.fchown, fd)
    for entry in entries:
        below = component + "/" + entry.name
        with _refusing(path, below, "read"):
            info = entry.stat(follow_symlinks=False)
        # seen before it is opened: a mount point of another filesystem is not even opened
        if info.st_dev != device:
            tally["skipped"].append(below)
        elif stat.S_ISDIR(info.st_mode):
            with _directory(fd, entry.name, path, below) as entry_fd:
                _change_tree(entry_fd, below, uid, gid, device, path, tally, depth + 1)
        else:
            _change_entry(fd, entry.name, info, uid, gid, tally, path, below)


def _change_entry(parent_fd, name, info, uid, gid, tally, path, component):
    """chown -h of the entry ``name`` below ``parent_fd``, seen as ``info``. A regular file is changed through a
    descriptor of the file it was seen to be, and refused when it has another name: a hard link an account made in its
    own tree to a file it does not own (/etc/shadow) would hand that file to it. Anything else is changed itself by
    name, a symbolic link never followed."""
    if not stat.S_ISREG(info.st_mode):
        _give_owner(info, uid, gid, tally, path, component, os.chown, name, dir_fd=parent_fd, follow_symlinks=False)
        return
    with _refusing(path, component, "opened", parent_fd, name):
        fd = os.open(name, os.O_RDONLY | os.O_NOFOLLOW | os.O_NONBLOCK | os.O_NOCTTY | os.O_CLOEXEC, dir_fd=parent_fd)
    try:
        opened = os.fstat(fd)
        if (opened.st_dev, opened.st_ino) != (info.st_dev, info.st_ino):
            raise NoFollowRefused(path, component, REPLACED_REFUSED)
        if opened.st_nlink > 1:
            raise NoFollowRefused(path, component, HARD_LINK_REFUSED)
        _give_owner(opened, uid, gid, tally, path, component, os.fchown, fd)
    finally:
        os.close(fd)


def _give_owner(info, uid, gid, tally, path, component, chown, *target, **options):
    """``chown(*target, uid, gid, **options)`` unless the entry seen as ``info`` has them already, counted in ``tally``.
    One already right is left alone: a chown would clear a program's set-user-ID bit for nothing."""
    if (uid == -1 or info.st_uid == uid) and (gid == -1 or info.st_gid == gid):
        tally["unchanged"] += 1
        return
    with _refusing(path, component, "changed"):
        chown(*target, uid, gid, **options)
    tally["changed"] += 1


def _made(parent_fd, name, path, component):
    """Whether ``name`` was made a directory below ``parent_fd`` (False: something is there already, which opening it
    as a directory without following a link then judges)."""
    with _refusing(path, component, "created"):
        try:
            os.mkdir(name, _PRIVATE_MODE, dir_fd=parent_fd)
        except FileExistsError:
            return False
    return True


def _settle(fd, uid, gid, mode, path, component):
    """The owner, group and exact mode of the open directory ``fd``; whether any of them was different."""
    with _refusing(path, component, "changed"):
        before = os.fstat(fd)
        os.fchown(fd, uid, gid)
        # the mode after the owner, as install sets them: nothing done after it can change it
        os.fchmod(fd, mode)
    return (before.st_uid, before.st_gid, stat.S_IMODE(before.st_mode)) != (uid, gid, mode)


@contextlib.contextmanager
def _directory(parent_fd, name, path, component):
    fd = _open_directory(parent_fd, name, path, component)
    try:
        yield fd
    finally:
        os.close(fd)


def _open_directory(parent_fd, name, path, component):
    with _refusing(path, component, "opened", parent_fd, name):
        return os.open(name, _DIRECTORY_FLAGS, dir_fd=parent_fd)


@contextlib.contextmanager
def _refusing(path, component, action, parent_fd=None, name=None):
    """An OSError of what the block does to ``component`` as NoFollowRefused; with ``parent_fd`` and ``name``, the
    block opens that entry as a directory."""
    try:
        yield
    except OSError as exc:
        if name is not None and exc.errno in (errno.ENOTDIR, errno.ELOOP):
            reason = _not_a_directory(parent_fd, name)
        elif exc.errno == errno.ENOENT:
            reason = "does not exist"
        else:
            reason = "cannot be %s: %s" % (action, exc.strerror)
        raise NoFollowRefused(path, component, reason) from exc


def _not_a_directory(parent_fd, name):
    """Why ``name`` did not open as a directory, from a look at the entry itself: the kernel answers the same for a
    symbolic link as for a file."""
    try:
        mode = os.stat(name, dir_fd=parent_fd, follow_symlinks=False).st_mode
    except OSError:
        return REPLACED_REFUSED
    if stat.S_ISLNK(mode):
        return LINK_REFUSED
    return REPLACED_REFUSED if stat.S_ISDIR(mode) else "is not a directory: refused"
