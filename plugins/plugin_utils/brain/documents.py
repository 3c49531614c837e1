"""The documents a knowledge base holds: files (Markdown, plain text and man pages in troff, also gzip-compressed),
walked in directories, and the runbooks. Each is read, converted and cut (chunking.py) into a :class:`SourceDocument`
whose fingerprint covers its bytes, its name, its path and the chunker; :class:`DocumentInfo` is a document as the
store lists it.
"""

from __future__ import annotations

import gzip
import hashlib
import os
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any, Iterator

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.chunking import CHUNKER_VERSION, Chunk, cut, man_page_sections, markdown_sections
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import Runbook
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import KnowledgeError

MAX_DOCUMENT_BYTES = 5 * 1024 * 1024
RUNBOOK_PREFIX = "runbook:"
MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
TEXT_SUFFIXES = frozenset({".txt", ".text"})
# nginx.8, ls.1.gz, openssl.1ssl, Carp.3perl.gz
_MAN_PAGE = re.compile(r"\.[1-9][a-z]*(?:\.gz)?$")
SUPPORTED = "Markdown (.md, .markdown), text (.txt, .text), man pages (.1-.9, also .gz)"


@dataclass(frozen=True)
class SourceDocument:
    """One document cut into chunks, ready to be stored."""

    document: str
    source: str  # file | runbook
    path: str
    title: str
    format: str  # markdown | text | man
    fingerprint: str
    chunks: tuple[Chunk, ...]
    runbook: str | None = None

    def chunk_id(self, number: int) -> str:
        return f"{self.document}:{number}"

    def metadata(self, number: int) -> dict[str, str | int]:
        metadata: dict[str, str | int] = {
            "document": self.document, "source": self.source, "path": self.path, "title": self.title, "format": self.format,
            "section": self.chunks[number].section, "chunk": number, "fingerprint": self.fingerprint,
        }
        if self.runbook:
            metadata["runbook"] = self.runbook
        return metadata


@dataclass(frozen=True)
class DocumentInfo:
    document: str
    source: str
    path: str
    title: str
    format: str
    runbook: str | None
    chunks: int

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)


def document_name(path: str | Path) -> str:
    """The name of a file's document when no logical name is given: its resolved path."""
    return str(Path(path).expanduser().resolve())


def walk(directory: Path) -> Iterator[Path]:
    """Supported files below ``directory``, in order, skipping hidden files and directories (.git, ...)."""
    for root, directories, files in os.walk(directory):
        directories[:] = sorted(d for d in directories if not d.startswith("."))
        for file in sorted(files):
            if not file.startswith(".") and document_format(Path(file)) is not None:
                yield Path(root) / file


def document_format(path: Path) -> str | None:
    suffix = path.suffix.lower()
    if suffix in MARKDOWN_SUFFIXES:
        return "markdown"
    if suffix in TEXT_SUFFIXES:
        return "text"
    if _MAN_PAGE.search(path.name.lower()):
        return "man"
    return None


def read_document(path: Path, name: str | None = None) -> SourceDocument:
    """Read, convert and cut one file. The fingerprint covers the bytes, the name, the path and the chunker."""
    fmt = document_format(path)
    if not path.exists():
        raise KnowledgeError("no such file or directory", field="paths", value=str(path))
    if fmt is None:
        raise KnowledgeError("unsupported file type", field="paths", value=str(path), hint=f"supported: {SUPPORTED}")
    try:
        if path.stat().st_size > MAX_DOCUMENT_BYTES:
            raise KnowledgeError(f"the file is larger than {MAX_DOCUMENT_BYTES // 1024 // 1024} MiB", field="paths", value=str(path), hint="split it")
        raw = path.read_bytes()
        data = gzip.decompress(raw) if path.name.lower().endswith(".gz") else raw
    except (OSError, EOFError) as exc:
        raise KnowledgeError("cannot read the file", field="paths", value=str(path), hint=str(exc)) from exc
    resolved = document_name(path)
    document = name or resolved
    fingerprint = _fingerprint("file", document, resolved, raw)
    text = data.decode("utf-8", errors="replace")
    if fmt == "markdown":
        heading, sections = markdown_sections(text)
        title = heading or path.name
    elif fmt == "man":
        heading, sections = man_page_sections(text)
        title = heading or path.name
    else:
        title, sections = path.name, [((), text)]
    return SourceDocument(document, "file", resolved, title, fmt, fingerprint, cut(title, sections))


def runbook_document(runbook: Runbook) -> SourceDocument:
    """A runbook as a document: what it matches and does, then its Markdown body."""
    try:
        raw = Path(runbook.path).read_bytes()
    except OSError as exc:
        raise KnowledgeError("cannot read the runbook", field="runbooks", value=runbook.path, hint=str(exc)) from exc
    action = f"steps: {'; '.join(runbook.templates)}" if runbook.steps else f"escalates: {runbook.escalate}"
    summary = (
        f"Runbook {runbook.id}: {runbook.title}\n"
        f"services: {', '.join(runbook.services)}; failure classes: {', '.join(runbook.failure_classes) or 'any'}; {action}"
    )
    _heading, sections = markdown_sections(runbook.body)
    document = f"{RUNBOOK_PREFIX}{runbook.id}"
    return SourceDocument(
        document, "runbook", runbook.path, runbook.title, "markdown", _fingerprint("runbook", document, runbook.path, raw),
        cut(runbook.title, [((), summary), *sections]), runbook=runbook.id,
    )


def _fingerprint(source: str, document: str, path: str, raw: bytes) -> str:
    digest = hashlib.sha256(f"{CHUNKER_VERSION}\0{source}\0{document}\0{path}\0".encode())
    digest.update(raw)
    return digest.hexdigest()
