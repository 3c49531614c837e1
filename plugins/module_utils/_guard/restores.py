"""The ``restores`` a rule may name: its operands put back what the package says of a directory (owner and group,
mode, the directory itself) on paths no service account can redirect, or a file's last known good copy as the host
kept it. The judge asks only when the rule's options and operands matched.
"""

from __future__ import annotations

import posixpath
import re
from typing import Callable, Mapping, Sequence

from ansible_collections.sentinel.heal.plugins.module_utils._guard.context import PackagePath, PolicyContext
from ansible_collections.sentinel.heal.plugins.module_utils._guard.placeholders import PolicyView, seen_owners

_RESOLVES_LAST = re.compile(r"/\.?/*$")
_OCTAL_MODE = re.compile(r"^[0-7]{3,4}$")


def _entries(paths: Sequence[str], context: PolicyContext, policy: PolicyView, *, follows_last: bool = True
             ) -> list[tuple[str, bool, PackagePath]] | None:
    """For each path that no service account can redirect: its canonical form, whether it is a package directory
    itself (not below one), and its entry; None when one is not such a path."""
    found = []
    for arg in paths:
        path = policy.paths.canonical(arg)
        # x/ and x/. make the kernel resolve x as a directory: even chown -h follows a link there
        follows = follows_last or bool(_RESOLVES_LAST.search(arg))
        safe = path is not None and (_repaired_without_following(arg, path, context) or _unredirectable(path, context, policy, follows))
        located = policy.package_path(path, context) if safe and path is not None else None
        if path is None or located is None:
            return None
        found.append((path, located[0] == path, located[1]))
    return found


def _repaired_without_following(arg: str, path: str, context: PolicyContext) -> bool:
    """Whether the host's executor does the repair of ``arg`` itself, never following a link at any component (a link
    is refused wherever it is met, so an account's directory on the way cannot redirect it): only a path it walks,
    absolute and normal, written as the policy reads it (it refuses x/, x/. and a link the policy resolves, /var/run)."""
    return context.repairs_without_following_links and arg == path


def _unredirectable(path: str, context: PolicyContext, policy: PolicyView, follows_last: bool) -> bool:
    """Whether every directory on the way to ``path`` is root's, so that no other account can put a symbolic link in
    place of the next component: a system directory (protected, a real directory), or one service_check saw owned by
    root. A step that does not follow the last component (chown -h or -R, without a trailing /) may reach it in a
    directory another account owns: a link there is changed itself, never what it leads to. Unknown means no: a
    person decides."""
    owners = seen_owners(context, policy)
    parent = posixpath.dirname(path)
    if not follows_last and parent != "/":
        parent = posixpath.dirname(parent)
    while parent != "/":
        if parent not in policy.paths.real_directories and owners.get(parent) != "root":
            return False
        parent = posixpath.dirname(parent)
    return True


def _crosses_no_mount(path: str, context: PolicyContext, policy: PolicyView) -> bool:
    """Whether no filesystem is mounted below ``path`` (a recursive repair would walk into it), as the host said."""
    if context.mounts is None:
        return False
    return not any(mount.startswith(path.rstrip("/") + "/") for mount in (policy.paths.canonical(seen) or seen for seen in context.mounts))


def _restores_ownership(operands: Sequence[str], options: Mapping[str, str], context: PolicyContext, policy: PolicyView) -> bool:
    """chown OWNER[:GROUP] PATH...: the package's owner and group, on its paths, none of which a service account can
    redirect; -R (which walks physically, never through a link) only where the package owns the whole tree and no
    filesystem is mounted below."""
    owner, colon, group = operands[0].partition(":")
    no_dereference = bool({"-R", "-h", "--no-dereference"} & set(options))
    entries = _entries(operands[1:], context, policy, follows_last=not no_dereference)
    if not entries or (colon and not group):
        return False
    recursive = "-R" in options
    return all(owner == entry.owner and (not group or group == entry.group)
               and (not recursive or (entry.tree and _crosses_no_mount(path, context, policy))) for path, _itself, entry in entries)


def _restores_mode(operands: Sequence[str], options: Mapping[str, str], context: PolicyContext, policy: PolicyView) -> bool:
    """chmod MODE PATH...: the package's mode, on a package directory itself."""
    entries = _entries(operands[1:], context, policy) or []
    return bool(entries) and all(itself and octal_mode(operands[0]) == entry.mode for _path, itself, entry in entries)


def _restores_directory(operands: Sequence[str], options: Mapping[str, str], context: PolicyContext, policy: PolicyView) -> bool:
    """install -d / mkdir: a package directory with the package's owner, group and mode (what the
    command leaves unsaid is root, root and 0755)."""
    entries = _entries(operands, context, policy) or []
    return bool(entries) and all(
        itself and options.get("-o", "root") == entry.owner and options.get("-g", "root") == entry.group
        and octal_mode(options.get("-m", "0755")) == entry.mode for _path, itself, entry in entries)


def _makes_directory_for_the_plan(operands: Sequence[str], options: Mapping[str, str], context: PolicyContext, policy: PolicyView) -> bool:
    """mkdir of a package directory itself, on a path no service account can redirect, left root's with mode 0755: the
    plan's later steps give it the package's owner, group and mode, or the plan waits for a person (judge_plan)."""
    entries = _entries(operands, context, policy) or []
    return bool(entries) and all(itself for _path, itself, _entry in entries)


def _restores_known_good(allowed: Callable[[PolicyContext], bool]) -> Callable[[Sequence[str], Mapping[str, str], PolicyContext, PolicyView], bool]:
    """sentinel-heal-restore FILE SHA256: a file of the incident that changed since the service last worked, and the
    hash of its last known good copy as the host recorded it, where ``allowed`` says the service's setting lets it."""
    def restores(operands: Sequence[str], options: Mapping[str, str], context: PolicyContext, policy: PolicyView) -> bool:
        if len(operands) != 2 or not allowed(context):
            return False
        copies = {policy.paths.canonical(path) or path: digest for path, digest in context.known_good_copies.items()}
        path = policy.paths.canonical(operands[0])
        return path is not None and path == operands[0] and copies.get(path) == operands[1]
    return restores


# the policy's ``restores`` of a last known good file (sentinel-heal-restore FILE SHA256), by what each binds: unattended
# (the service's restore_known_good is auto, and its configuration test checks the file as it goes back), approved by
# a person (approve, or auto where no configuration test can check it first), and a file that holds secrets (put back
# only with a person, whichever of the two the setting is)
KNOWN_GOOD_SETTINGS: dict[str, Callable[[PolicyContext], bool]] = {
    "known_good": lambda context: context.restore_known_good == "auto" and context.restore_tested,
    "known_good_with_a_person": lambda context: context.restore_known_good == "approve" or (
        context.restore_known_good == "auto" and not context.restore_tested),
    "known_good_holding_secrets": lambda context: context.restore_known_good in ("auto", "approve"),
}


def octal_mode(text: str) -> int | None:
    return int(text, 8) if _OCTAL_MODE.match(text) else None


RESTORES: dict[str, Callable[[Sequence[str], Mapping[str, str], PolicyContext, PolicyView], bool]] = {
    "ownership": _restores_ownership,
    "mode": _restores_mode,
    "directory": _restores_directory,
    "directory_for_the_plan": _makes_directory_for_the_plan,
    **{restores: _restores_known_good(setting) for restores, setting in KNOWN_GOOD_SETTINGS.items()},
}
