# -*- coding: utf-8 -*-
# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""The last known good configuration of a service, kept on the host (standard library only).

While every check of a service passes, service_check keeps a copy of its configuration: the files its Debian packages
mark as configuration (dpkg's conffiles), the files those directories include (``sites-enabled/*``, ``conf.d/*``), the
local unit file and drop-ins, and what the inventory declares (``configs``: paths or globs). The copies stay in a
root-only directory on the host; the controller is told names, sizes and hashes. When the service fails, what changed
since: each file modified, added or removed (a unified diff computed here, redacted, capped) with its time, and the
installs, upgrades and removals of its packages in dpkg's log since the last good check.

One room of about 470 lines: keeping the copies, saying what changed since, and putting one back all work on the one
root-only store (its manifest, its blobs, its fingerprint of the service's files); split, each would reach into the
others' files.
"""

from __future__ import annotations

import contextlib
import difflib
import glob
import hashlib
import json
import os
import re
import stat
import tempfile
import time

from ansible_collections.sentinel.heal.plugins.module_utils._configuration_tests import configuration_test
from ansible_collections.sentinel.heal.plugins.module_utils._guard.redact import redact
from ansible_collections.sentinel.heal.plugins.module_utils._host.command import run
from ansible_collections.sentinel.heal.plugins.module_utils._host.nofollow import (
    NoFollowRefused,
    open_file,
    read_file,
    replace_file,
    replace_with_link,
)
from ansible_collections.sentinel.heal.plugins.module_utils._text import clip

KNOWN_GOOD_DIR = "/var/lib/sentinel-heal/known-good"
ETC = "/etc"
DPKG_INFO = "/var/lib/dpkg/info"
DPKG_STATUS = "/var/lib/dpkg/status"
DPKG_LOG = "/var/log/dpkg.log"
# where apt leaves the packages it downloaded: a version it installed before may still be there
APT_ARCHIVES = "/var/cache/apt/archives"
# where a person's own unit file and drop-ins live, below /etc (the packaged unit changes with its package)
LOCAL_UNITS = "systemd/system"
# a bound against a runaway directory, never a cap on a service's own configuration (apache2 ships 159 files)
MAX_FILES = 2048
# a larger file is recorded by its hash only: a change is named, never shown or put back
MAX_FILE_BYTES = 256 * 1024
MAX_DIFF_CHARS = 4000
MAX_PACKAGE_CHANGES = 20
MANIFEST = "manifest.json"
# beside the manifest: the owner, group and mode of each of the service's directories while it was healthy (_owned_dirs.py)
OWNED_DIRS = "owned-dirs.json"
# beside it: how many times systemd had restarted each unit of the service when a check last found it healthy (_settle.py)
RESTARTS = "restarts.json"
# directories of a package's configuration whose files its main file includes
_INCLUDED = re.compile(r"(-enabled|\.d)$")
_DPKG_LINE = re.compile(r"^(\S+ \S+) (install|upgrade|remove|purge) (\S+) (\S+) (\S+)$")


class KnownGoodError(Exception):
    """The known-good directory cannot be trusted or written (another owner, others may read it, a full disk)."""


def configuration_files(spec, packages, info_dir=None, etc=None):
    """The service's configuration files, sorted, at most MAX_FILES: its packages' conffiles that exist, the files in the
    include directories beside them, its local unit file and drop-ins, ``/etc/NAME.conf`` of its names (a maintainer
    script writes some, memcached's, which no package then owns), and the declared ``configs``."""
    return _configuration(spec, packages, info_dir, etc)[0]


def _configuration(spec, packages, info_dir=None, etc=None):
    """(the service's configuration files, the links among them by path: each link's ``text`` and the file it
    ``leads_to``). A link is kept as the link it is (sites-enabled/000-default.conf, which a2ensite made): one a person
    replaces by an edited copy is put back as that link, never as a second file."""
    info_dir, etc = info_dir or DPKG_INFO, etc or ETC
    conffiles = []
    for package in packages:
        conffiles.extend(_conffiles(package, info_dir))
    found = set(path for path in conffiles if os.path.isfile(path))
    names = set(packages) | set([spec.get("service") or spec["name"], spec["name"]])
    # the service's own configuration directory (/etc/nginx of nginx-common), never a shared one (/etc/default)
    roots = set(root for root in (_etc_root(path, etc) for path in found) if root and any(
        name == os.path.basename(root) or name.startswith(os.path.basename(root) + "-") for name in names))
    for directory in sorted(roots):
        for entry in _listdir(directory):
            included = os.path.join(directory, entry)
            if _INCLUDED.search(entry) and os.path.isdir(included):
                found.update(os.path.join(included, name) for name in _listdir(included) if os.path.isfile(os.path.join(included, name)))
    found.update(path for path in (os.path.join(etc, name + ".conf") for name in names) if os.path.isfile(path))
    unit, local_units = "%s.service" % (spec.get("service") or spec["name"]), os.path.join(etc, LOCAL_UNITS)
    found.update(path for path in [os.path.join(local_units, unit), *glob.glob(os.path.join(local_units, unit + ".d", "*.conf"))]
                 if os.path.isfile(path))
    for pattern in spec.get("configs") or []:
        found.update(path for path in glob.glob(pattern) if os.path.isfile(path))
    files = sorted(_own_targets(found, roots))[:MAX_FILES]
    kept = set(files)
    links = {}
    for path in sorted(found):
        with contextlib.suppress(OSError):
            if os.path.islink(path) and os.path.realpath(path) in kept:
                links[path] = dict(text=os.readlink(path), leads_to=os.path.realpath(path))
    return files, links


def _own_targets(found, roots):
    """Each file once, by the path a person edits (sites-enabled/default is a link to sites-available/default): a link
    counts only when it leads to one of the files found or into the service's own configuration directory. One that
    leads elsewhere is no configuration of the service: a service account that owns its configuration directory can
    put a link to /etc/passwd there, and a copy of passwd kept as good would be put back over it."""
    targets = set()
    for path in found:
        target = os.path.realpath(path)
        if target == path or target in found or any(target.startswith(root + "/") for root in roots):
            targets.add(target)
    return targets


def keep(name, spec, packages_of, root=None, now=None, timeout=30):
    """Called while every check of the service passes: its configuration as it is now becomes the last known good one.
    A service keeps running on the configuration it started with, so a changed configuration counts as good only when
    the service's configuration test passes on it (a broken edit not yet loaded is no good copy: the last one stays).
    A file is copied once per content; the manifest is rewritten only when something changed, and its time says when
    the service was last seen good. Returns what the controller is told (no contents)."""
    now = time.time() if now is None else now
    directory = _service_dir(root or KNOWN_GOOD_DIR, name)
    manifest = _read_manifest(directory)
    packages = _packages(manifest, spec, packages_of)
    paths, links = _configuration(spec, packages)
    files = dict((path, entry) for path, entry in ((path, _fingerprint(path)) for path in paths) if entry)
    before = (manifest or {}).get("files") or {}
    changed = manifest is None or manifest.get("packages") != packages or manifest.get("dpkg_status") != _mtime(DPKG_STATUS) or \
        manifest.get("links", {}) != links or \
        dict((path, entry["sha256"]) for path, entry in before.items()) != dict((path, entry["sha256"]) for path, entry in files.items())
    if changed:
        test = configuration_test(spec)
        rc, output = run(test, timeout) if test else (0, "")
        if rc != 0:
            return dict(at=now, changed=False, files=[], refused="its configuration test (%s) fails on the configuration as it is now: "
                        "it is not kept as good (%s)" % (" ".join(test), redact(output.strip().splitlines()[-1] if output.strip() else "no output")))
        for path, entry in files.items():
            if entry["size"] <= MAX_FILE_BYTES:
                entry["kept"] = _store_blob(directory, path, entry["sha256"])
        _write_json(os.path.join(directory, MANIFEST), dict(packages=packages, dpkg_status=_mtime(DPKG_STATUS), files=files, links=links,
                                                            taken_at=now))
        _drop_unreferenced(directory, files)
    else:
        files = before
    os.utime(os.path.join(directory, MANIFEST), (now, now))
    return dict(at=now, changed=changed, files=[dict(path=path, size=entry["size"], sha256=entry["sha256"], kept=entry.get("kept", False))
                                                for path, entry in sorted(files.items())])


def changes_since_good(name, spec, failed_at, redact_values=(), root=None, dpkg_log=None):
    """What changed in the service's configuration and packages since it was last seen good, or None when it never
    was (nothing is guessed then). Each file change has its kind, its time and, for a kept text file, a unified diff
    of the good version against the current one; each package change its action, versions and time."""
    directory = os.path.join(root or KNOWN_GOOD_DIR, name)
    # read only what keep() made: a directory another account owns, or others may write, is no known good
    manifest = _read_manifest(directory) if all(_private(path) for path in (root or KNOWN_GOOD_DIR, directory)) else None
    if manifest is None:
        return None
    good_at = _mtime(os.path.join(directory, MANIFEST))
    before = manifest.get("files") or {}
    current = configuration_files(spec, manifest.get("packages") or [])
    now_files = dict((path, entry) for path, entry in ((path, _fingerprint(path)) for path in current) if entry)
    links = manifest.get("links") or {}
    # a link that is a file of its own now (a person's edited copy in its place) changed from what the link led to
    replaced = dict((path, link) for path, link in links.items() if path in now_files and link.get("leads_to") in before)
    files = []
    for path in sorted(set(before) | set(now_files)):
        # a file no longer among the service's (its package removed, the cap reached) is removed only if it is gone
        old, new = before.get(path) or (before[replaced[path]["leads_to"]] if path in replaced else None), now_files.get(path) or _fingerprint(path)
        if old and new and old["sha256"] == new["sha256"]:
            continue
        kind = "modified" if old and new else ("added" if new else "removed")
        change = dict(path=path, change=kind, changed_at=new["mtime"] if new else None,
                      before_failure_s=round(failed_at - new["mtime"]) if new else None)
        if path in replaced:
            change["good_link"] = replaced[path]["text"]
        if kind == "modified":
            change["diff"] = _diff(directory, path, old, redact_values)
            if old.get("kept"):
                # what a restore is bound to: the copy of this hash, put back only while it is still that copy
                change["good_sha256"] = old["sha256"]
        files.append(change)
    return dict(good_at=good_at, files=files,
                packages=package_changes(manifest.get("packages") or [], good_at, dpkg_log))


def keep_record(name, record_name, record, root=None):
    """``record`` (a JSON object: what a check saw of the service while it was healthy) kept as ``record_name`` beside
    the service's manifest, written completely or not at all, root-only."""
    _write_json(os.path.join(_service_dir(root or KNOWN_GOOD_DIR, name), record_name), record)


def kept_record(name, record_name, root=None):
    """What keep_record kept for the service as ``record_name``, or None: never kept, unreadable, or in a directory
    another account owns or others may write (nothing there is taken on its word then)."""
    root = root or KNOWN_GOOD_DIR
    directory = os.path.join(root, name)
    if not all(_private(path) for path in (root, directory)):
        return None
    try:
        with open(os.path.join(directory, record_name)) as handle:
            record = json.load(handle)
    except (OSError, ValueError):
        return None
    return record if isinstance(record, dict) else None


def restore(name, path, sha256, test_argv=(), root=None, now=None, timeout=60):
    """Put back the last known good version of one of the service's files, as a person approved it: the copy kept must
    still be the one of hash ``sha256`` (the diff they saw). Where the good version was a link (and the file it leads to
    is still that copy), the link is put back in place of the file. The current version is kept aside first
    (NAME/aside/TIME/PATH in the known-good directory: a person's edit is never lost), the good one replaces it at once
    with the file's owner and mode and without following a link, then the service's own configuration test
    (``test_argv``) runs; when it fails, the current version is put back. Returns ``restored``, ``aside`` and ``test``
    (argv, rc, output, redacted)."""
    now = time.time() if now is None else now
    directory = _service_dir(root or KNOWN_GOOD_DIR, name)
    link = ((_read_manifest(directory) or {}).get("links") or {}).get(path)
    good = good_copy(name, path, sha256, root)
    if link and (_fingerprint(link["leads_to"]) or {}).get("sha256") != sha256:
        raise KnownGoodError("%s: %s, the file the link %s led to, changed since it was good: putting the link back would not put back "
                             "what was approved (look at what changed again)" % (name, link["leads_to"], path))
    current = read_file(path, MAX_FILE_BYTES)
    aside = os.path.join(directory, "aside", time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now)), path.lstrip("/"))
    os.makedirs(os.path.dirname(aside), mode=0o700, exist_ok=True)
    _write_bytes(aside, current)
    copy = replace_with_link(path, link["text"]) if link else replace_file(path, good)
    test = None
    if test_argv:
        rc, output = run(list(test_argv), timeout)
        test = dict(argv=list(test_argv), rc=rc, output=redact(output))
        if rc != 0:
            replace_file(path, current, over_link_as=copy if link else None)
            return dict(restored=False, aside=aside, test=test)
    return dict(restored=True, aside=aside, test=test, **(dict(link=link["text"]) if link else {}))


def good_copy(name, path, sha256, root=None):
    """The kept last known good version of ``path`` whose hash is ``sha256`` (of the file it led to, where it was a
    link); KnownGoodError when there is none."""
    directory = _service_dir(root or KNOWN_GOOD_DIR, name)
    manifest = _read_manifest(directory) or {}
    link = (manifest.get("links") or {}).get(path)
    entry = (manifest.get("files") or {}).get(link["leads_to"] if link else path)
    good = _read_text_blob(directory, sha256) if entry and entry.get("sha256") == sha256 and entry.get("kept") else None
    if good is None:
        raise KnownGoodError("%s: no last known good copy of %s with hash %s (the copy changed since the plan was approved: "
                             "look at what changed again)" % (name, path, sha256[:12]))
    return good


def restore_step(name, path, sha256, test_argv=()):
    """The step ``sentinel-heal-restore PATH SHA256`` of a service's plan, done (:func:`restore`), as a command's
    result: rc 0 when the good version is back, stdout what was done (JSON), stderr why not."""
    try:
        done = restore(name, path, sha256, test_argv=test_argv)
    except (KnownGoodError, NoFollowRefused, OSError) as exc:
        return dict(rc=1, stdout="", stderr="the last known good version was not put back: %s" % exc)
    return dict(rc=0 if done["restored"] else 1, stdout=json.dumps(done, sort_keys=True), stderr="" if done["restored"] else
                "the configuration test failed with the last known good version, so the current one was put back")


def _read_text_blob(directory, sha256):
    """The kept copy of that hash, checked against it (a copy changed on disk is no copy)."""
    try:
        with open(os.path.join(directory, "blobs", sha256), "rb") as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except OSError:
        return None
    return data if hashlib.sha256(data).hexdigest() == sha256 else None


def package_changes(packages, since, dpkg_log=None, archives=None):
    """Installs, upgrades and removals of ``packages`` in dpkg's log after ``since``, oldest first (at most
    MAX_PACKAGE_CHANGES, the latest kept). An upgrade or removal whose previous version apt still keeps in its archive
    names that package file (``cached``): what a downgrade would install."""
    wanted, found = set(packages), []
    try:
        with open(dpkg_log or DPKG_LOG, errors="replace") as log:
            for line in log:
                match = _DPKG_LINE.match(line.strip())
                if not match or match.group(3).split(":")[0] not in wanted:
                    continue
                try:
                    at = time.mktime(time.strptime(match.group(1), "%Y-%m-%d %H:%M:%S"))
                except ValueError:
                    continue
                # dpkg writes whole seconds: a change in the second of the last good check may have come after it
                if at + 1 > since:
                    change = dict(action=match.group(2), package=match.group(3).split(":")[0], at=at,
                                  before=_version(match.group(4)), after=_version(match.group(5)))
                    cached = _cached_package(match.group(3), change["before"], archives or APT_ARCHIVES) if change["action"] != "install" else None
                    if cached:
                        change["cached"] = cached
                    found.append(change)
    except OSError:
        return []
    return found[-MAX_PACKAGE_CHANGES:]


def _cached_package(name_and_arch, version, archives):
    """apt's file of that version of the package (NAME_VERSION_ARCH.deb, the epoch's colon written %3a), when it is a
    regular file only root may change, else None."""
    if not version:
        return None
    name, _colon, arch = name_and_arch.partition(":")
    path = os.path.join(archives, "%s_%s_%s.deb" % (name, version.replace(":", "%3a"), arch or "all"))
    try:
        st = os.lstat(path)
    except OSError:
        return None
    return path if stat.S_ISREG(st.st_mode) and st.st_uid == 0 and not st.st_mode & 0o022 else None


def _version(text):
    return None if text == "<none>" else text


def _diff(directory, path, old, redact_values):
    """The good version against the current one, redacted and capped; None when either is not kept or not text."""
    if not old.get("kept"):
        return None
    good = _read_text(os.path.join(directory, "blobs", old["sha256"]))
    current = _read_text(path)
    if good is None or current is None:
        return None
    lines = difflib.unified_diff(good.splitlines(True), current.splitlines(True), fromfile="%s (last known good)" % path, tofile=path)
    return clip(redact("".join(lines), redact_values), MAX_DIFF_CHARS)


def _read_text(path):
    try:
        with open_file(path) as handle:
            data = handle.read(MAX_FILE_BYTES + 1)
    except (NoFollowRefused, OSError):
        return None
    if len(data) > MAX_FILE_BYTES or b"\0" in data:
        return None
    return data.decode("utf-8", "replace")


def _conffiles(package, info_dir):
    """The conffiles dpkg lists for the package (its multi-arch name too): "PATH" or "PATH remove-on-upgrade" per line."""
    for candidate in [os.path.join(info_dir, "%s.conffiles" % package), *glob.glob(os.path.join(info_dir, "%s:*.conffiles" % package))]:
        try:
            with open(candidate, errors="replace") as listing:
                return [line.split()[0] for line in listing if line.strip().startswith("/")]
        except OSError:
            continue
    return []


def _etc_root(path, etc):
    """ETC/NAME of a path below it (the package's configuration directory), or None."""
    below = os.path.relpath(path, etc).split(os.sep)
    return os.path.join(etc, below[0]) if len(below) > 1 and below[0] != os.pardir else None


def _listdir(directory):
    try:
        return sorted(os.listdir(directory))
    except OSError:
        return []


def _packages(manifest, spec, packages_of):
    """The service's packages, asked of dpkg only when its status changed since they were recorded."""
    if manifest is not None and manifest.get("dpkg_status") == _mtime(DPKG_STATUS):
        return manifest.get("packages") or []
    return packages_of(spec)


def _fingerprint(path):
    """Size, hash and time of a regular file of the service, read without following a link at any component (None
    for anything else): what it is kept, compared and put back as."""
    digest = hashlib.sha256()
    try:
        with open_file(path) as handle:
            st = os.fstat(handle.fileno())
            for block in iter(lambda: handle.read(65536), b""):
                digest.update(block)
    except (NoFollowRefused, OSError):
        return None
    return dict(size=st.st_size, sha256=digest.hexdigest(), mtime=st.st_mtime)


def _service_dir(root, name):
    """root/NAME, made root-only; a root directory another account owns, or others may enter, is not trusted."""
    for directory in (root, os.path.join(root, name), os.path.join(root, name, "blobs")):
        try:
            os.makedirs(directory, mode=0o700, exist_ok=True)
            st = os.lstat(directory)
        except OSError as exc:
            raise KnownGoodError("%s: %s" % (directory, exc.strerror)) from None
        if not stat.S_ISDIR(st.st_mode) or st.st_uid != os.geteuid() or st.st_mode & 0o077:
            raise KnownGoodError("%s: not a directory only its owner (%d) may read; fix or remove it" % (directory, os.geteuid()))
    return os.path.join(root, name)


def _private(directory):
    try:
        st = os.lstat(directory)
    except OSError:
        return False
    return stat.S_ISDIR(st.st_mode) and st.st_uid == os.geteuid() and not st.st_mode & 0o077


def _store_blob(directory, path, digest):
    blob = os.path.join(directory, "blobs", digest)
    if os.path.exists(blob):
        return True
    try:
        data = read_file(path, MAX_FILE_BYTES)
        if hashlib.sha256(data).hexdigest() != digest:
            return False  # it changed while it was read: the next good check keeps it
        _write_bytes(blob, data)
    except (NoFollowRefused, OSError):
        return False
    return True


def _drop_unreferenced(directory, files):
    referenced = set(entry["sha256"] for entry in files.values())
    for name in _listdir(os.path.join(directory, "blobs")):
        if name not in referenced:
            with contextlib.suppress(OSError):
                os.unlink(os.path.join(directory, "blobs", name))


def _read_manifest(directory):
    try:
        with open(os.path.join(directory, MANIFEST)) as handle:
            manifest = json.load(handle)
    except (OSError, ValueError):
        return None
    return manifest if isinstance(manifest, dict) else None


def _write_json(path, value):
    _write_bytes(path, json.dumps(value, sort_keys=True).encode("utf-8"))


def _write_bytes(path, data):
    """Written completely or not at all, readable by its owner only."""
    handle, temporary = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".tmp-")
    try:
        with os.fdopen(handle, "wb") as out:
            out.write(data)
        os.replace(temporary, path)
    except OSError:
        if os.path.exists(temporary):
            os.unlink(temporary)
        raise


def _mtime(path):
    try:
        return os.stat(path).st_mtime
    except OSError:
        return None
