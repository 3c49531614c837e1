"""Which filesystem a directory is on, and whether SQLite may keep a database there.

SQLite relies on POSIX advisory locks and, in WAL mode, on a shared-memory index beside the database. Over NFS, CIFS/SMB
and the other network or FUSE-remote filesystems those locks are missing, emulated or not shared between machines, so
two writers can corrupt the file or lose each other's writes. A state dir there is refused before SQLite opens anything.
The filesystem is read from the kernel's own table (``/proc/self/mountinfo``): the mount whose mount point is the
longest prefix of the directory (or of its nearest existing ancestor, for a directory not made yet).
"""

from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

MOUNTINFO = Path("/proc/self/mountinfo")

# Filesystems on which SQLite's locking cannot be trusted: network filesystems, and FUSE filesystems that reach
# another machine (their type is fuse.PROGRAM).
NETWORK_FILESYSTEMS = frozenset({
    "nfs", "nfs4", "cifs", "smb3", "smbfs", "smb2", "ncpfs", "ncp", "afs", "coda", "9p", "ceph", "glusterfs", "lustre",
    "gpfs", "beegfs", "orangefs", "pvfs2", "ocfs2", "gfs2", "davfs", "vboxsf", "vmhgfs", "prl_fs", "sshfs", "s3fs",
})
NETWORK_FUSE_PROGRAMS = frozenset({
    "sshfs", "glusterfs", "ceph", "ceph-fuse", "cephfs", "s3fs", "rclone", "gcsfuse", "goofys", "davfs", "davfs2",
    "juicefs", "seaweedfs", "moosefs", "mfs", "lizardfs", "vmhgfs-fuse", "smbnetfs", "curlftpfs", "blobfuse", "blobfuse2",
    "mountpoint-s3", "beegfs", "gvfsd-fuse", "afpfs", "nfs",
})

_ESCAPE = re.compile(r"\\([0-7]{3})")


@dataclass(frozen=True)
class Mount:
    """One line of mountinfo: where it is mounted, the filesystem type and what was mounted (the source)."""

    mount_point: str
    fstype: str
    source: str

    @property
    def is_network(self) -> bool:
        return is_network_filesystem(self.fstype)


def is_network_filesystem(fstype: str) -> bool:
    """Whether SQLite's locking is unsafe on a filesystem of this type (as mountinfo names it)."""
    kind = fstype.lower()
    if kind in NETWORK_FILESYSTEMS:
        return True
    base, _dot, subtype = kind.partition(".")
    return base in ("fuse", "fuseblk") and (subtype in NETWORK_FUSE_PROGRAMS or subtype in NETWORK_FILESYSTEMS)


def parse_mountinfo(text: str) -> list[Mount]:
    """The mounts of a mountinfo text, in its order (a later mount on the same point hides an earlier one).

    A line is ``ID PARENT MAJ:MIN ROOT MOUNT_POINT OPTIONS [OPTIONAL...] - FSTYPE SOURCE SUPER_OPTIONS``; the kernel
    writes a space, tab, newline or backslash in a path as an octal escape (``\\040``)."""
    mounts = []
    for line in text.splitlines():
        fields = line.split(" ")
        if "-" not in fields[6:]:
            continue
        separator = fields.index("-", 6)
        if len(fields) < separator + 3 or len(fields) < 5:
            continue
        mounts.append(Mount(mount_point=unescape(fields[4]), fstype=fields[separator + 1], source=unescape(fields[separator + 2])))
    return mounts


def unescape(field: str) -> str:
    return _ESCAPE.sub(lambda match: chr(int(match.group(1), 8)), field)


def mount_of(path: str | Path, mounts: list[Mount]) -> Mount | None:
    """The mount a path is on: the longest mount point that is the path or one of its ancestors (the last such line when
    several mounts are stacked on one point). ``path`` must be absolute and free of symbolic links."""
    text = str(path)
    best: Mount | None = None
    for mount in mounts:
        point = mount.mount_point
        within = text == point or point == "/" or text.startswith(point.rstrip("/") + "/")
        if within and (best is None or len(point) >= len(best.mount_point)):
            best = mount
    return best


def nearest_existing(path: str | Path) -> Path:
    """The path itself or, for one not made yet, its nearest existing ancestor, with symbolic links resolved."""
    candidate = Path(os.path.abspath(Path(path).expanduser()))
    while not candidate.exists() and candidate != candidate.parent:
        candidate = candidate.parent
    return candidate.resolve()


def filesystem_of(path: str | Path, mountinfo: str | None = None) -> Mount | None:
    """The mount of a directory (or of where it would be made); None when the kernel's table cannot be read."""
    if mountinfo is None:
        try:
            mountinfo = MOUNTINFO.read_text(encoding="utf-8", errors="surrogateescape")
        except OSError:
            return None
    return mount_of(nearest_existing(path), parse_mountinfo(mountinfo))


def network_filesystem(path: str | Path, mountinfo: str | None = None) -> Mount | None:
    """The network filesystem a directory is on, or None when it is on a local one (or the table cannot be read)."""
    mount = filesystem_of(path, mountinfo)
    return mount if mount is not None and mount.is_network else None
