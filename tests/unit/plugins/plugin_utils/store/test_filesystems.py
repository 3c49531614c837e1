"""Which filesystem a state dir is on (the kernel's mountinfo), and the refusal of a SQLite memory on a network one.

The mountinfo below is what a kernel writes for real NFS, CIFS/SMB and sshfs mounts (copied from hosts that had them);
the lab test (tests/integration/test_cluster_memory_lab.py) mounts a real sshfs and meets the refusal through the
memory module."""

from __future__ import annotations

from pathlib import Path

import pytest

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.embeddings import embedder_from_options
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.knowledge import Knowledge
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import KnowledgeError, MemoryStoreError
from ansible_collections.sentinel.heal.plugins.plugin_utils.store import filesystems
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.filesystems import (
    filesystem_of,
    is_network_filesystem,
    mount_of,
    network_filesystem,
    parse_mountinfo,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.memory import Memory

MOUNTINFO = "".join(line + "\n" for line in (
    r"22 28 0:21 / /proc rw,nosuid,nodev,noexec,relatime shared:12 - proc proc rw",
    r"28 1 259:2 / / rw,relatime shared:1 - ext4 /dev/nvme0n1p2 rw,errors=remount-ro",
    r"31 28 0:26 / /tmp rw,nosuid,nodev shared:14 - tmpfs tmpfs rw,size=8155420k,nr_inodes=1048576",
    r"98 28 0:47 / /srv/nfs rw,relatime shared:52 - nfs4 fileserver.example.com:/export/ansible rw,vers=4.2,"
    r"rsize=1048576,wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys,clientaddr=10.0.0.5,"
    r"local_lock=none,addr=10.0.0.2",
    r"99 28 0:48 / /srv/nfs3 rw,relatime shared:53 - nfs 10.0.0.2:/export/legacy rw,vers=3,rsize=1048576,"
    r"wsize=1048576,namlen=255,hard,proto=tcp,timeo=600,retrans=2,sec=sys,mountaddr=10.0.0.2,mountvers=3,"
    r"mountport=20048,mountproto=udp,local_lock=none,addr=10.0.0.2",
    r"120 28 0:52 / /mnt/share rw,relatime shared:60 - cifs //fileserver/share rw,vers=3.1.1,cache=strict,"
    r"username=alice,uid=0,noforceuid,gid=0,noforcegid,addr=10.0.0.3,file_mode=0755,dir_mode=0755,soft,nounix,"
    r"serverino,mapposix,rsize=4194304,wsize=4194304,bsize=1048576,echo_interval=60,actimeo=1,closetimeo=1",
    r"121 28 0:53 / /mnt/Team\040Share rw,relatime shared:61 - smb3 //fileserver/team\040share rw,vers=3.1.1,"
    r"cache=strict,username=bob,uid=1000,forceuid,gid=1000,forcegid,addr=10.0.0.3,file_mode=0644,dir_mode=0755,soft,"
    r"nounix,serverino,mapposix,rsize=4194304,wsize=4194304,bsize=1048576,echo_interval=60,actimeo=1,closetimeo=1",
    r"130 31 0:55 / /tmp/remote rw,nosuid,nodev,relatime shared:70 - fuse.sshfs sentinel@10.77.0.11:/tmp/x rw,"
    r"user_id=0,group_id=0",
    r"131 130 0:56 / /tmp/remote/local rw,relatime shared:71 - tmpfs tmpfs rw,size=1024k",
    r"140 28 0:60 / /var/lib/awx rw,relatime shared:80 - ext4 /dev/mapper/vg-awx rw",
    r"141 28 0:61 / /var/lib/awx rw,relatime shared:81 - nfs4 nas:/awx rw,vers=4.1,addr=10.0.0.9",
    r"150 28 0:62 / /srv/nfs-not rw,relatime shared:90 - xfs /dev/sdb1 rw,attr2,inode64,logbufs=8,logbsize=32k,"
    r"noquota",
))


@pytest.fixture
def mounts() -> list[filesystems.Mount]:
    return parse_mountinfo(MOUNTINFO)


@pytest.mark.parametrize(("path", "fstype", "source"), [
    ("/srv/nfs/sentinel-heal", "nfs4", "fileserver.example.com:/export/ansible"),
    ("/srv/nfs3/a/b", "nfs", "10.0.0.2:/export/legacy"),
    ("/mnt/share/state", "cifs", "//fileserver/share"),
    ("/mnt/Team Share/sentinel", "smb3", "//fileserver/team share"),  # the kernel writes a space in a path as \040
    ("/tmp/remote", "fuse.sshfs", "sentinel@10.77.0.11:/tmp/x"),
    ("/var/lib/awx/state", "nfs4", "nas:/awx"),  # two mounts on one point: the later one is what is seen there
])
def test_a_directory_on_a_network_filesystem_is_found_by_its_longest_mount_point(
        mounts: list[filesystems.Mount], path: str, fstype: str, source: str) -> None:
    mount = mount_of(path, mounts)
    assert mount is not None and (mount.fstype, mount.source) == (fstype, source) and mount.is_network


@pytest.mark.parametrize(("path", "fstype"), [
    ("/home/alice/.local/state/sentinel-heal", "ext4"),
    ("/tmp/sentinel", "tmpfs"),
    ("/tmp/remote/local/state", "tmpfs"),  # a local mount inside the sshfs one
    ("/tmp/remotely", "tmpfs"),  # a name that starts like a mount point is not inside it
    ("/srv/nfs-not/state", "xfs"),
    ("/srv/nfs", "nfs4"),
])
def test_the_longest_mount_point_wins_and_only_whole_path_components_match(mounts: list[filesystems.Mount], path: str, fstype: str) -> None:
    mount = mount_of(path, mounts)
    assert mount is not None and mount.fstype == fstype


@pytest.mark.parametrize(("fstype", "network"), [
    ("nfs", True), ("nfs4", True), ("cifs", True), ("smb3", True), ("smbfs", True), ("fuse.sshfs", True), ("9p", True),
    ("ceph", True), ("fuse.ceph-fuse", True), ("glusterfs", True), ("fuse.glusterfs", True), ("fuse.rclone", True), ("lustre", True),
    ("ext4", False), ("xfs", False), ("btrfs", False), ("tmpfs", False), ("overlay", False), ("zfs", False), ("fuse", False),
    ("fuseblk", False), ("fuse.lxcfs", False),
])
def test_network_filesystems_are_told_from_local_ones(fstype: str, network: bool) -> None:
    assert is_network_filesystem(fstype) is network


def test_a_directory_not_made_yet_is_judged_by_its_nearest_existing_ancestor(tmp_path: Path) -> None:
    mountinfo = f"1 0 0:1 / / rw - ext4 /dev/root rw\n2 1 0:2 / {tmp_path} rw - nfs4 nas:/state rw,vers=4.2\n"
    mount = network_filesystem(tmp_path / "not" / "made" / "yet", mountinfo)
    assert mount is not None and (mount.mount_point, mount.fstype) == (str(tmp_path), "nfs4")
    assert network_filesystem(tmp_path.parent, mountinfo) is None


def test_a_symbolic_link_to_a_network_filesystem_is_followed(tmp_path: Path) -> None:
    (tmp_path / "remote").mkdir()
    (tmp_path / "link").symlink_to(tmp_path / "remote")
    mountinfo = f"1 0 0:1 / / rw - ext4 /dev/root rw\n2 1 0:2 / {tmp_path / 'remote'} rw - cifs //nas/state rw\n"
    mount = network_filesystem(tmp_path / "link" / "state", mountinfo)
    assert mount is not None and mount.fstype == "cifs"


def test_this_machines_temporary_directory_is_local(tmp_path: Path) -> None:
    mount = filesystem_of(tmp_path)
    assert mount is not None and not mount.is_network, mount


def test_lines_that_are_not_mounts_are_skipped() -> None:
    assert parse_mountinfo("garbage\n\n1 2 3\n") == []


def _on_nfs(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, directory: Path) -> None:
    """This process's mountinfo says that ``directory`` is an NFS mount (a copy of the real one, with a line added)."""
    mountinfo = tmp_path / "mountinfo"
    mountinfo.write_text(Path("/proc/self/mountinfo").read_text() + f"999 1 0:99 / {directory} rw,relatime - nfs4 nas:/export/state rw,vers=4.2\n")
    monkeypatch.setattr(filesystems, "MOUNTINFO", mountinfo)


def test_a_sqlite_memory_on_a_network_filesystem_is_refused_naming_the_path_the_filesystem_and_the_alternative(
        monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    share = tmp_path / "share"
    share.mkdir()
    _on_nfs(monkeypatch, tmp_path, share)
    with pytest.raises(MemoryStoreError) as refused:
        Memory(share / "sentinel-heal")
    message = str(refused.value)
    assert refused.value.field == "state_dir" and refused.value.value == str(share / "sentinel-heal")
    assert f"the state dir is on a network filesystem (nfs4: nas:/export/state on {share}), where SQLite's file locking is unsafe" in message
    assert "autoheal_memory_url" in message and "postgresql://" in message and "a local disk" in message
    assert not (share / "sentinel-heal").exists()  # nothing made there
    assert Memory.for_check_mode(share / "sentinel-heal") is None


def test_the_knowledge_store_on_a_network_filesystem_is_refused_too(monkeypatch: pytest.MonkeyPatch, tmp_path: Path) -> None:
    share = tmp_path / "share"
    share.mkdir()
    _on_nfs(monkeypatch, tmp_path, share)
    with pytest.raises(KnowledgeError, match=r"the knowledge store is on a network filesystem \(nfs4: nas:/export/state on ") as refused:
        Knowledge(share / "knowledge", embedder_from_options({}))
    assert "a local disk" in str(refused.value) and not (share / "knowledge").exists()
