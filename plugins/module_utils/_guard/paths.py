"""Paths as the kernel will open them, for the guard.

A rule that binds a path to the incident ("a file below the service's log directory") is only as
good as the path it compares. Lexical normalisation is not what the kernel does: ``/var/run`` is a
symlink to ``/run`` on every current distribution, so ``/var/run/../lib/postgresql`` opens
``/usr/lib/postgresql``, not ``/var/lib/postgresql``; ``//etc`` is ``/etc``; a path relative to the
login user's home can climb anywhere. This module gives two answers for an argument:

* :meth:`PathResolver.canonical`, the one path the kernel will open, for rules that ALLOW. It
  follows the distribution's symlinks the policy lists and lets ``..`` climb only out of system
  directories that are known to be real directories (owned by root, so no service account can
  swap them for a symlink). Anything else (a relative path, ``..`` after a directory that could be
  a symlink, globs) has no canonical form, and a rule that needs one does not match.
* :meth:`PathResolver.readings`, every path the argument could denote, for rules that BLOCK:
  the lexical reading, the reading through the known symlinks (where a /proc magic link such as
  ``/proc/1/root`` stands for whatever it leads to) and, for a relative path, the reading from
  ``/``. A hard deny matches when any reading does.
"""

from __future__ import annotations

import fnmatch
import posixpath
import re
from dataclasses import dataclass, field
from typing import Iterable, Mapping

_MAX_SYMLINK_HOPS = 40  # the kernel's limit (ELOOP)
_GLOB_CHARACTERS = frozenset("*?[]")
# /proc's links whose target depends on the process that follows them: its root, cwd, open files, itself
_PROC_MAGIC_LINK = re.compile(r"^/proc/([^/]+/(task/[^/]+/)?(root|cwd|exe|fd|map_files|ns)|self|thread-self)$")


@dataclass(frozen=True)
class PathResolver:
    """Resolves paths with the policy's table of known symlinks and its real system directories."""

    symlinks: Mapping[str, str]
    real_directories: frozenset[str]
    _canonical: dict[str, str | None] = field(default_factory=dict, compare=False, repr=False)
    _readings: dict[str, tuple[str, ...]] = field(default_factory=dict, compare=False, repr=False)

    def canonical(self, arg: str) -> str | None:
        """The path the kernel opens for an absolute ``arg``, or None when it cannot be known here."""
        if arg in self._canonical:
            return self._canonical[arg]
        resolved = None
        if arg.startswith("/") and not _GLOB_CHARACTERS.intersection(arg):
            resolved = self._resolve(arg, strict=True)
        if len(self._canonical) < 65536:
            self._canonical[arg] = resolved
        return resolved

    def readings(self, arg: str) -> tuple[str, ...]:
        """Every path ``arg`` may denote (empty when it does not look like a path at all)."""
        cached = self._readings.get(arg)
        if cached is not None:
            return cached
        value = arg[1:] if arg.startswith("@") else arg  # curl-style @FILE
        found: list[str] = []
        if "/" in value or value.startswith("."):
            absolute = value if value.startswith("/") else "/" + value
            # lexically, through the known symlinks, and walked without them (a /proc magic link met on the way
            # stands for where it leads, which a lexical "root/.." would hide)
            found += [_lexical(absolute), self._resolve(absolute, strict=False) or "/",
                      self._resolve(absolute, strict=False, follow=False) or "/"]
        readings = tuple(dict.fromkeys(found))
        if len(self._readings) < 65536:
            self._readings[arg] = readings
        return readings

    def _resolve(self, path: str, *, strict: bool, follow: bool = True) -> str | None:
        """Walk ``path`` one component at a time. Strict: None where the answer is not known here (``..``
        out of a directory that may be a symlink, a /proc magic link). Otherwise: the walk through
        every symlink the table knows (none without ``follow``), a /proc magic link itself standing for where it leads."""
        pending = [part for part in reversed(path.split("/")) if part not in ("", ".")]
        resolved: list[str] = []
        hops = 0
        while pending:
            part = pending.pop()
            if part == "..":
                if resolved:
                    if strict and "/" + "/".join(resolved) not in self.real_directories:
                        return None  # the directory climbed out of may be a symlink nobody told us about
                    resolved.pop()
                continue
            resolved.append(part)
            if _PROC_MAGIC_LINK.match("/" + "/".join(resolved)):
                # another process's root, cwd, executable, open files: a view of anything
                return None if strict else "/" + "/".join(resolved)
            target = self.symlinks.get("/" + "/".join(resolved)) if follow else None
            if target is not None:
                hops += 1
                if hops > _MAX_SYMLINK_HOPS:
                    return None
                resolved = []
                pending.extend(part for part in reversed(target.split("/")) if part not in ("", "."))
        return "/" + "/".join(resolved)


def _lexical(path: str) -> str:
    """Normalised without following anything; ``//x`` is ``/x`` on Linux (POSIX leaves it open)."""
    return posixpath.normpath(re.sub("/+", "/", path))


def compile_patterns(patterns: Iterable[str], *, below: bool, within_component: bool = False) -> re.Pattern[str]:
    """One regular expression for shell-style path patterns (``*`` matches ``/`` too, so ``/proc/*/root``
    also matches ``/proc/1/task/1/root``); with ``below``, a pattern also covers everything below it. With
    ``within_component``, ``*`` and ``?`` stay inside one component, as the shell's globs do: for exceptions, which
    must never reach into a directory they do not name."""
    translate = _translate_within_component if within_component else fnmatch.translate
    parts = [translate(p) for pattern in patterns for p in ((pattern, pattern.rstrip("/") + "/*") if below else (pattern,))]
    return re.compile("|".join(parts) if parts else r"(?!)")


def _translate_within_component(pattern: str) -> str:
    """fnmatch's pattern language, with ``*`` and ``?`` matching no ``/`` (brackets are taken literally)."""
    regex = "".join("[^/]*" if piece == "*" else "[^/]" if piece == "?" else re.escape(piece) for piece in re.split(r"([*?])", pattern))
    return rf"(?s:{regex})\Z"


def validate_symlinks(table: Mapping[str, str]) -> str | None:
    """Why a symlink table cannot be used, or None: every key and target is an absolute, normal path."""
    for link, target in table.items():
        for path in (link, target):
            if not isinstance(path, str) or not path.startswith("/") or _lexical(path) != path or path == "/":
                return f"{path!r} is not an absolute, normalised path below /"
    return None
