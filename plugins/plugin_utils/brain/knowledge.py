"""The knowledge base: the operator's own documents and the runbooks, searchable by meaning.

A ChromaDB store on the controller (``<state_dir>/knowledge``, beside the memory) holds one
collection of chunks with vectors from our own embedder: ChromaDB is given the vectors, never an
embedding function of its own, so nothing is downloaded and a store always answers in the space it
was built in. The embedder's name is kept in the collection's metadata and a store is refused by
another model.

Documents are Markdown (split on headings, then by size with overlap), plain text and man pages
(troff, also gzip-compressed). Chunk ids are stable, ``<document>:<n>``, where the document is the
resolved path or a logical name, so ingesting again updates a document in place: chunks whose text
changed are embedded again, chunks that no longer exist are deleted, and a document whose bytes did
not change is skipped after one metadata lookup.

A query takes the chunks nearest in meaning as candidates and ranks them again by the words they
share with the query, so that an error message pasted as the query finds the text that quotes it.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import os
import re
from dataclasses import asdict, dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Iterator, Mapping, Sequence, cast

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.embeddings import Embedder
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import Runbook, RunbookLibrary
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import KnowledgeError
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.filesystems import network_filesystem

if TYPE_CHECKING:
    from chromadb.api.client import Client
    from chromadb.api.models.Collection import Collection

KNOWLEDGE_DIR = "knowledge"
COLLECTION = "sentinel-heal"
CHUNK_SIZE = 1000
CHUNK_OVERLAP = 150
# Part of every document's fingerprint: a change to how documents are cut re-cuts all of them.
CHUNKER_VERSION = "1"
MAX_DOCUMENT_BYTES = 5 * 1024 * 1024
RUNBOOK_PREFIX = "runbook:"
MARKDOWN_SUFFIXES = frozenset({".md", ".markdown"})
TEXT_SUFFIXES = frozenset({".txt", ".text"})
# nginx.8, ls.1.gz, openssl.1ssl, Carp.3perl.gz
_MAN_PAGE = re.compile(r"\.[1-9][a-z]*(?:\.gz)?$")
# Retrieval: this many vector candidates per hit asked for are ranked again with the query's words.
CANDIDATES_PER_HIT = 8
MIN_CANDIDATES = 32
LEXICAL_WEIGHT = 0.3
_TERM = re.compile(r"[a-z0-9](?:[a-z0-9._:/-]*[a-z0-9])?")
_STOP_WORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "have", "in", "is", "it", "its", "of", "on", "or", "that",
    "the", "this", "to", "was", "with",
})
SUPPORTED = "Markdown (.md, .markdown), text (.txt, .text), man pages (.1-.9, also .gz)"


@dataclass(frozen=True)
class Chunk:
    text: str
    section: str


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


@dataclass
class DocumentChange:
    """What an ingest or drop did (or, in check mode, would do) to one document, counted in chunks."""

    document: str
    path: str
    source: str
    status: str = "unchanged"  # added | updated | unchanged | removed
    added: int = 0
    updated: int = 0
    unchanged: int = 0
    removed: int = 0

    @property
    def changed(self) -> bool:
        return bool(self.added or self.updated or self.removed)


@dataclass
class IngestReport:
    documents: list[DocumentChange] = field(default_factory=list)

    @property
    def changed(self) -> bool:
        return any(change.changed for change in self.documents)

    def totals(self) -> dict[str, int]:
        return {key: sum(getattr(change, key) for change in self.documents) for key in ("added", "updated", "unchanged", "removed")}

    def extend(self, other: IngestReport) -> IngestReport:
        self.documents.extend(other.documents)
        return self

    def to_dict(self) -> dict[str, Any]:
        return {"changed": self.changed, "documents": [asdict(change) for change in self.documents], **self.totals()}


@dataclass(frozen=True)
class Hit:
    """One chunk found by a query. ``score`` orders hits: cosine similarity plus LEXICAL_WEIGHT x ``lexical``."""

    id: str
    text: str
    document: str
    source: str
    path: str
    title: str
    section: str
    runbook: str | None
    distance: float  # cosine distance of the vectors: 0 same direction, 1 unrelated
    lexical: float  # the share of the query's terms the chunk contains
    metadata: Mapping[str, Any]

    @property
    def score(self) -> float:
        return 1.0 - self.distance + LEXICAL_WEIGHT * self.lexical

    def to_dict(self) -> dict[str, Any]:
        rounded = {name: round(getattr(self, name), 4) for name in ("score", "distance", "lexical")}
        return {**asdict(self), "metadata": dict(self.metadata), **rounded}


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


@dataclass
class _Plan:
    """The writes an ingest needs; planned first so that check mode reports exactly what a run would do."""

    report: IngestReport = field(default_factory=IngestReport)
    upserts: list[tuple[str, str, dict[str, str | int]]] = field(default_factory=list)
    metadata_updates: list[tuple[str, dict[str, str | int]]] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)


class Knowledge:
    """The store in ``directory``; ``close()`` (or ``with``) releases ChromaDB's files.

    An open store holds an exclusive lock on the directory: the forks of one play and several plays
    share it, and ChromaDB's files take one process at a time. Open it for as short as you can.
    """

    def __init__(self, directory: str | Path, embedder: Embedder) -> None:
        self.directory = Path(directory).expanduser()
        self.embedder = embedder
        remote = network_filesystem(self.directory)
        if remote is not None:
            raise KnowledgeError(
                f"the knowledge store is on a network filesystem ({remote.fstype}: {remote.source} on {remote.mount_point}), where the "
                "locking of its SQLite files is unsafe", field="state_dir", value=str(self.directory),
                hint="point autoheal_state_dir (state_dir) at a local disk: each controller keeps a knowledge base of its own (the "
                     "runbooks, and the documents ingested there); the memory is shared on PostgreSQL (autoheal_memory_url)")
        try:
            import chromadb
            from chromadb.config import Settings

            self.directory.mkdir(parents=True, exist_ok=True, mode=0o700)
            self._lock = open(self.directory / ".lock", "a")  # noqa: SIM115 - held until close()
            fcntl.flock(self._lock, fcntl.LOCK_EX)
            self._client = cast("Client", chromadb.PersistentClient(path=str(self.directory), settings=Settings(anonymized_telemetry=False)))
        except Exception as exc:  # chromadb reports a bad directory with many exception types
            if getattr(self, "_lock", None) is not None:
                self._lock.close()
            raise KnowledgeError("cannot open the knowledge store", field="state_dir", value=str(self.directory), hint=str(exc)) from exc
        self._collection: Collection | None = None

    def close(self) -> None:
        try:
            self._client.close()
        finally:
            self._lock.close()

    def __enter__(self) -> Knowledge:
        return self

    def __exit__(self, *exc_info: object) -> None:
        self.close()

    # -- writing ---------------------------------------------------------------------------------

    def ingest(self, paths: Iterable[str | Path], name: str | None = None, *, dry_run: bool = False) -> IngestReport:
        """Add or update the documents at ``paths`` (files, or directories walked for supported files).

        ``name`` gives a single path a logical document name instead of its resolved path (for a
        directory, its files become ``name/relative path``). Stored documents below a given
        directory whose files are gone are removed.
        """
        given = [Path(path).expanduser() for path in paths]
        if name is not None and (len(given) != 1 or name.startswith(RUNBOOK_PREFIX) or not name.strip()):
            raise KnowledgeError(
                "a document name needs exactly one path and cannot start with 'runbook:'", field="name", value=name,
                hint="ingest each named document in its own call",
            )
        read: list[SourceDocument] = []
        walked: list[Path] = []
        for path in given:
            if path.is_dir():
                walked.append(path.resolve())
                read.extend(read_document(file, _document_name(name, path, file)) for file in walk(path))
            else:
                read.append(read_document(path, name))
        documents = list({document.document: document for document in read}.values())  # a file given twice is one document
        collection = self._readable()
        plan = _Plan()
        for document in documents:
            self._plan_document(collection, document, plan)
        seen = {document.document for document in documents}
        for info in self.documents(source="file") if walked else ():
            if info.document not in seen and not Path(info.path).exists() and any(_is_within(Path(info.path), d) for d in walked):
                self._plan_removal(collection, info, plan)
        return self._apply(plan, dry_run)

    def sync_runbooks(self, library: RunbookLibrary | None = None, *, dry_run: bool = False) -> IngestReport:
        """Make the stored runbooks those of ``library`` (the shipped ones by default): add, update, remove."""
        documents = [runbook_document(runbook) for runbook in (library if library is not None else RunbookLibrary.load()).runbooks]
        collection = self._readable()
        plan = _Plan()
        for document in documents:
            self._plan_document(collection, document, plan)
        current = {document.document for document in documents}
        for info in self.documents(source="runbook"):
            if info.document not in current:
                self._plan_removal(collection, info, plan)
        return self._apply(plan, dry_run)

    def drop(self, documents: str | Iterable[str] | None = None, *, dry_run: bool = False) -> IngestReport:
        """Remove a document or the named documents, or everything (the whole collection) when ``documents`` is None.

        Works whatever model built the store, so a store of another model can always be emptied.
        """
        if isinstance(documents, str):
            documents = [documents]
        collection = self._existing()
        report = IngestReport()
        if collection is None:
            return report
        listed = {info.document: info for info in self.documents()}
        wanted = list(listed) if documents is None else [document for document in dict.fromkeys(documents) if document in listed]
        report.documents = [
            DocumentChange(info.document, info.path, info.source, "removed", removed=info.chunks) for info in map(listed.__getitem__, wanted)
        ]
        if dry_run:
            return report
        try:
            if documents is None:
                self._client.delete_collection(COLLECTION)
                self._collection = None
            else:
                for document in wanted:
                    collection.delete(where={"document": document})
        except Exception as exc:  # chromadb and its storage raise many exception types
            raise KnowledgeError("cannot remove from the knowledge store", field="state_dir", value=str(self.directory), hint=str(exc)) from exc
        return report

    def _plan_document(self, collection: Collection | None, document: SourceDocument, plan: _Plan) -> None:
        stored = collection.get(where={"document": document.document}, include=["metadatas"]) if collection is not None else None
        stored_metadata = dict(zip(stored["ids"], stored["metadatas"] or [], strict=True)) if stored is not None else {}
        change = DocumentChange(document.document, document.path, document.source, "updated" if stored_metadata else "added")
        plan.report.documents.append(change)
        fingerprints = {metadata.get("fingerprint") for metadata in stored_metadata.values()}
        if fingerprints == {document.fingerprint} and len(stored_metadata) == len(document.chunks):
            change.status, change.unchanged = "unchanged", len(stored_metadata)
            return
        # The bytes changed: embed again only the chunks whose text changed.
        stored_texts = self._texts(collection, list(stored_metadata))
        for number, chunk in enumerate(document.chunks):
            chunk_id, metadata = document.chunk_id(number), document.metadata(number)
            if chunk_id not in stored_texts:
                change.added += 1
                plan.upserts.append((chunk_id, chunk.text, metadata))
            elif stored_texts[chunk_id] != chunk.text:
                change.updated += 1
                plan.upserts.append((chunk_id, chunk.text, metadata))
            else:
                plan.metadata_updates.append((chunk_id, metadata))  # the new fingerprint, and a new path if the file moved
                if _described(stored_metadata[chunk_id]) == _described(metadata):
                    change.unchanged += 1
                else:
                    change.updated += 1
        current = {document.chunk_id(number) for number in range(len(document.chunks))}
        gone = [chunk_id for chunk_id in stored_metadata if chunk_id not in current]
        change.removed = len(gone)
        plan.deletes.extend(gone)
        if change.status == "updated" and not change.changed:
            change.status = "unchanged"  # other bytes, same chunks (a troff comment, trailing spaces)

    @staticmethod
    def _texts(collection: Collection | None, ids: list[str]) -> dict[str, str]:
        if collection is None or not ids:
            return {}
        found = collection.get(ids=ids, include=["documents"])
        return dict(zip(found["ids"], found["documents"] or [], strict=True))

    def _plan_removal(self, collection: Collection | None, info: DocumentInfo, plan: _Plan) -> None:
        ids = collection.get(where={"document": info.document}, include=[])["ids"] if collection is not None else []
        plan.report.documents.append(DocumentChange(info.document, info.path, info.source, "removed", removed=len(ids)))
        plan.deletes.extend(ids)

    def _apply(self, plan: _Plan, dry_run: bool) -> IngestReport:
        if dry_run or not (plan.upserts or plan.metadata_updates or plan.deletes):
            return plan.report
        # Embed first: a model that fails leaves no trace, not even an empty store marked with its name.
        vectors = self.embedder.embed([text for _chunk_id, text, _metadata in plan.upserts]) if plan.upserts else []
        if len(vectors) != len(plan.upserts):
            message = f"the embedder returned {len(vectors)} vectors for {len(plan.upserts)} chunks"
            raise KnowledgeError(message, field="embeddings", value=self.embedder.name)
        collection = self._writable()
        try:
            step = self._client.get_max_batch_size()
            for start in range(0, len(plan.upserts), step):
                batch = plan.upserts[start:start + step]
                collection.upsert(
                    ids=[chunk_id for chunk_id, _text, _metadata in batch],
                    embeddings=vectors[start:start + step],  # type: ignore[arg-type]
                    documents=[text for _chunk_id, text, _metadata in batch],
                    metadatas=[metadata for _chunk_id, _text, metadata in batch],
                )
            for start in range(0, len(plan.metadata_updates), step):
                updates = plan.metadata_updates[start:start + step]
                collection.update(ids=[chunk_id for chunk_id, _metadata in updates], metadatas=[metadata for _chunk_id, metadata in updates])
            for start in range(0, len(plan.deletes), step):
                collection.delete(ids=plan.deletes[start:start + step])
        except Exception as exc:  # chromadb and its storage raise many exception types
            raise KnowledgeError("cannot write the knowledge store", field="state_dir", value=str(self.directory), hint=str(exc)) from exc
        return plan.report

    # -- reading ---------------------------------------------------------------------------------

    def query(self, text: str, k: int = 4, where: Mapping[str, Any] | None = None) -> list[Hit]:
        """The ``k`` chunks that answer ``text`` best, best first; ``where`` filters on chunk metadata (ChromaDB syntax).

        The nearest chunks by meaning are the candidates; among them the ones that share the
        query's words rank higher. A small sentence model is swayed by a service name: for
        ``nginx bind() to 0.0.0.0:80 failed (98: Address already in use)`` it prefers any chunk
        about nginx, while the chunk quoting that error word for word is the one an operator wants.
        """
        if k < 1:
            raise KnowledgeError("k must be at least 1", field="k", value=k)
        collection = self._readable()
        if collection is None:
            return []
        count = collection.count()
        if count == 0:
            return []
        vector = self.embedder.embed([text])[0]
        try:
            found = collection.query(
                query_embeddings=[vector],  # type: ignore[arg-type]
                n_results=min(max(k * CANDIDATES_PER_HIT, MIN_CANDIDATES), count),
                where=dict(where) if where else None,
                include=["documents", "metadatas", "distances"],
            )
        except Exception as exc:  # a bad ``where`` surfaces as one of chromadb's many exception types
            raise KnowledgeError("the knowledge query failed", field="where", value=where, hint=str(exc)) from exc
        query_terms = terms(text)
        hits = []
        for chunk_id, chunk_text, metadata, distance in zip(
            found["ids"][0], (found["documents"] or [[]])[0], (found["metadatas"] or [[]])[0], (found["distances"] or [[]])[0], strict=True,
        ):
            metadata = dict(metadata or {})
            hits.append(Hit(
                id=chunk_id, text=chunk_text or "", document=str(metadata.get("document", "")), source=str(metadata.get("source", "")),
                path=str(metadata.get("path", "")), title=str(metadata.get("title", "")), section=str(metadata.get("section", "")),
                runbook=str(metadata["runbook"]) if metadata.get("runbook") else None, distance=float(distance),
                lexical=len(query_terms & terms(chunk_text or "")) / len(query_terms) if query_terms else 0.0, metadata=metadata,
            ))
        return sorted(hits, key=lambda hit: -hit.score)[:k]

    def documents(self, source: str | None = None) -> list[DocumentInfo]:
        """Every stored document (of ``source``: file or runbook) with its number of chunks, by name."""
        collection = self._existing()
        if collection is None:
            return []
        counts: dict[str, int] = {}
        first: dict[str, Mapping[str, Any]] = {}
        for metadata in collection.get(where={"source": source} if source else None, include=["metadatas"])["metadatas"] or []:
            document = str(metadata.get("document", ""))
            counts[document] = counts.get(document, 0) + 1
            first.setdefault(document, metadata)
        return [
            DocumentInfo(
                document=document, source=str(first[document].get("source", "")), path=str(first[document].get("path", "")),
                title=str(first[document].get("title", "")), format=str(first[document].get("format", "")),
                runbook=str(first[document]["runbook"]) if first[document].get("runbook") else None, chunks=counts[document],
            )
            for document in sorted(counts)
        ]

    def count(self) -> int:
        collection = self._existing()
        return collection.count() if collection is not None else 0

    # -- the collection ----------------------------------------------------------------------------

    def _existing(self) -> Collection | None:
        if self._collection is None:
            from chromadb.errors import NotFoundError

            try:
                self._collection = self._client.get_collection(COLLECTION, embedding_function=None)
            except NotFoundError:
                return None
        return self._collection

    def _readable(self) -> Collection | None:
        """The collection if there is one, after checking that it holds vectors of our embedder."""
        collection = self._existing()
        if collection is not None:
            self._check_embedder(collection)
        return collection

    def _writable(self) -> Collection:
        collection = self._existing()
        if collection is None:
            metadata = {"embedder": self.embedder.name, "created_by": "sentinel.heal"}
            try:
                collection = self._client.create_collection(
                    COLLECTION, configuration={"hnsw": {"space": "cosine"}}, metadata=metadata, embedding_function=None,
                )
            except Exception:  # another process created it first: use theirs
                collection = self._existing()
                if collection is None:
                    raise
            self._collection = collection
        self._check_embedder(collection)
        return collection

    def _check_embedder(self, collection: Collection) -> None:
        built_with = (collection.metadata or {}).get("embedder")
        if built_with != self.embedder.name:
            raise KnowledgeError(
                f"the knowledge store in {self.directory} was built with the embedding model {built_with!r}, not {self.embedder.name!r}",
                field="embeddings", value=self.embedder.name,
                hint=f"use the embeddings {built_with!r} again, or drop the store (operation: drop) and ingest with the new model",
            )


# -- documents -------------------------------------------------------------------------------------


def document_name(path: str | Path) -> str:
    """The name of a file's document when no logical name is given: its resolved path."""
    return str(Path(path).expanduser().resolve())


def resolve_documents(knowledge: Knowledge, paths: Iterable[str | Path] = (), name: str | None = None) -> list[str]:
    """The stored documents that ``paths`` (files, or directories: every document below) and ``name`` refer to."""
    wanted = [name] if name else []
    stored = knowledge.documents()
    for path in paths:
        resolved = Path(document_name(path))
        wanted.append(str(resolved))
        wanted.extend(info.document for info in stored if info.source == "file" and _is_within(Path(info.path), resolved))
    return list(dict.fromkeys(wanted))


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


def _document_name(name: str | None, directory: Path, file: Path) -> str | None:
    return f"{name}/{file.relative_to(directory).as_posix()}" if name else None


def terms(text: str) -> set[str]:
    """The words of a text as a query matches them: lower case, numbers, paths and addresses whole (0.0.0.0:80)."""
    return {term for term in _TERM.findall(text.lower()) if term not in _STOP_WORDS}


def _described(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """What a chunk's metadata says about it, without the fingerprint of the bytes it came from."""
    return {key: value for key, value in metadata.items() if key != "fingerprint"}


def _is_within(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents


# -- cutting ---------------------------------------------------------------------------------------

Section = tuple[Sequence[str], str]  # (heading path, text)


def cut(title: str, sections: Iterable[Section]) -> tuple[Chunk, ...]:
    """Chunks of about CHUNK_SIZE characters, each starting with where it is (title > heading > ...)."""
    chunks = []
    for headings, text in sections:
        crumbs = list(headings) if headings and headings[0].casefold() == title.casefold() else [title, *headings]
        where = " > ".join(crumbs)
        for piece in split_by_size(text, max(CHUNK_SIZE - len(where) - 2, CHUNK_SIZE // 2)):
            chunks.append(Chunk(f"{where}\n\n{piece}", where))
    return tuple(chunks)


_WHITESPACE = re.compile(r"\s+")


def split_by_size(text: str, size: int = CHUNK_SIZE, overlap: int = CHUNK_OVERLAP) -> list[str]:
    """Pieces of at most ``size`` characters, ending after a paragraph, line, sentence or word where one is near,
    each starting ``overlap`` characters (on a word) before the previous one ended."""
    text = text.strip()
    pieces = []
    start = 0
    while len(text) - start > size:
        end = _break_point(text, start + size // 2, start + size)
        pieces.append(text[start:end].strip())
        overlap_start = max(end - overlap, start + 1)
        space = _WHITESPACE.search(text, overlap_start - 1, end) if not text[overlap_start - 1].isspace() else None
        start = space.end() if space else overlap_start
    pieces.append(text[start:].strip())
    return [piece for piece in pieces if piece]


def _break_point(text: str, low: int, high: int) -> int:
    for separator in ("\n\n", "\n", ". ", " "):
        found = text.rfind(separator, low, high)
        if found != -1:
            return found + len(separator)
    return high


_FRONT_MATTER = re.compile(r"\A---[ \t]*\n.*?\n---[ \t]*(?:\n|\Z)", re.DOTALL)
_ATX_HEADING = re.compile(r"^ {0,3}(#{1,6})[ \t]+(.*?)(?:[ \t]+#+)?[ \t]*$")
_SETEXT_UNDERLINE = re.compile(r"^ {0,3}(=+|-+)[ \t]*$")
_FENCE = re.compile(r"^ {0,3}(`{3,}|~{3,})")


def markdown_sections(text: str) -> tuple[str | None, list[Section]]:
    """(the first level-1 heading, [(heading path, text)]); headings inside code fences are text."""
    sections: list[Section] = []
    stack: list[tuple[int, str]] = []
    lines: list[str] = []
    title = None
    fence = None

    def close_section() -> None:
        body = "\n".join(lines).strip()
        if body:
            sections.append((tuple(heading for _level, heading in stack), body))
        lines.clear()

    def open_section(level: int, heading: str) -> None:
        nonlocal title
        close_section()
        while stack and stack[-1][0] >= level:
            stack.pop()
        stack.append((level, heading))
        if title is None and level == 1:
            title = heading

    for line in _FRONT_MATTER.sub("", text, count=1).splitlines():
        if fence:
            lines.append(line)
            if line.strip().startswith(fence):
                fence = None
            continue
        fenced = _FENCE.match(line)
        atx = _ATX_HEADING.match(line)
        underline = _SETEXT_UNDERLINE.match(line)
        if fenced:
            fence = fenced.group(1)
            lines.append(line)
        elif atx:
            open_section(len(atx.group(1)), atx.group(2).strip())
        elif underline and lines and lines[-1].strip() and (len(lines) == 1 or not lines[-2].strip()):
            heading = lines.pop().strip()
            open_section(1 if underline.group(1)[0] == "=" else 2, heading)
        else:
            lines.append(line)
    close_section()
    return title, sections


# troff escapes: \f font, \* string, \n register, \s size, \(xx and \[name] characters, \h'..' motions
_TROFF_ESCAPE = re.compile(r"""\\(\[[^\]]*\]|\(..|[fF*nsgkm]\[[^\]]*\]|[fF*nsgkm]\(..|s[+-]?\d+|[fF*ngkm].|[hvwoxlLbDNRZCX]'[^']*'|.)""")
_TROFF_COMMENT = re.compile(r'\\["#].*$')
_TROFF_CHARACTERS = {
    "em": "--", "en": "-", "hy": "-", "mi": "-", "aq": "'", "dq": '"', "lq": '"', "rq": '"', "oq": "'", "cq": "'", "bu": "*",
    "co": "(c)", "rg": "(R)", "tm": "(TM)", "pl": "+", "mu": "x", "<=": "<=", ">=": ">=", "->": "->", "<-": "<-", "ga": "`",
    "ti": "~", "ha": "^", "rs": "\\", "sl": "/", "ba": "|", "or": "|", "de": " degrees", "lB": "[", "rB": "]", "lC": "{", "rC": "}",
}
_TROFF_SIMPLE = {
    "-": "-", "e": "\\", "\\": "\\", "&": "", " ": " ", "~": " ", "0": " ", "|": "", "^": "", "%": "", "c": "", ":": "", ",": "",
    "/": "", "'": "'", "`": "`", ".": ".", "t": "\t", "d": "", "u": "", "r": "", "p": "", "z": "", "a": "",
}
_MAN_HEADINGS = {"SH": 1, "Sh": 1, "SS": 2, "Ss": 2}
_MAN_ALTERNATING = frozenset({"BR", "BI", "IB", "IR", "RB", "RI"})
# Requests and macros that break the text; sp, br, nf and fi are roff requests, Sp, Vb and Ve pod2man's.
_MAN_BREAKS = frozenset({"PP", "LP", "P", "TP", "TQ", "HP", "Pp", "Lp", "Bl", "El", "Bd", "Ed", "RS", "RE", "Sp", "sp", "br"})
_MAN_NO_FILL = frozenset({"nf", "EX", "Vb", "Bd"})
_MAN_FILL = frozenset({"fi", "EE", "Ve", "Ed"})
# Capitalized macros without text (roff requests, all lower case, never have any).
_MAN_SILENT = frozenset({"TH", "Dd", "Dt", "Os", "UE", "ME", "YS", "PD", "DT", "AT", "UC", "IX"})
_BLOCK_DEFINITIONS = frozenset({"de", "de1", "am", "ig"})
_TROFF_CONTINUATION = re.compile(r"(?<!\\)\\\n")  # a line ending in a backslash goes on on the next line
_MACRO = re.compile(r"^[.'][ \t]*([^ \t\\]*)[ \t]*(.*)$")


def man_page_sections(source: str) -> tuple[str | None, list[Section]]:
    """The text of a man page (man or basic mdoc macros): (NAME(SECTION) from .TH, [(heading path, text)]).

    Filled text is joined into paragraphs as troff would; no-fill blocks (examples) keep their lines.
    """
    sections: list[Section] = []
    headings: list[str] = []
    lines: list[str] = []
    title = None
    skip_until_dots = False
    fill = True

    def add(text: str) -> None:
        if fill and lines and lines[-1] and text:
            lines[-1] = f"{lines[-1]} {text}"
        else:
            lines.append(text)

    def close_section() -> None:
        body = re.sub(r"\n{3,}", "\n\n", "\n".join(lines)).strip()
        if body:
            sections.append((tuple(headings), body))
        lines.clear()

    for raw in _TROFF_CONTINUATION.sub("", source).splitlines():
        if skip_until_dots:
            skip_until_dots = raw.strip() != ".."
            continue
        line = _TROFF_COMMENT.sub("", raw)
        request = _MACRO.match(line)
        if request is None:
            add(troff_text(line).strip() if fill else troff_text(line))
            continue
        macro, arguments = request.group(1), _troff_arguments(request.group(2))
        if macro in _BLOCK_DEFINITIONS:
            skip_until_dots = True
        elif macro == "TH" and arguments:
            title = f"{arguments[0]}({arguments[1]})" if len(arguments) > 1 else arguments[0]
        elif macro in _MAN_HEADINGS:
            close_section()
            del headings[_MAN_HEADINGS[macro] - 1:]
            headings.append(" ".join(arguments).strip() or "(untitled)")
        elif macro in _MAN_NO_FILL or macro in _MAN_FILL:
            fill = macro in _MAN_FILL
            lines.append("")
        elif macro in _MAN_BREAKS:
            lines.append("")
        elif macro == "IP":
            lines.extend(["", arguments[0]] if arguments else [""])
        elif macro in _MAN_ALTERNATING:
            add("".join(arguments))
        elif macro == "OP":
            add(f"[{' '.join(arguments)}]")
        elif macro[:1].isupper() and macro not in _MAN_SILENT:
            add(" ".join(arguments))  # B, I, SM, UR, SY, and mdoc's Nm, Nd, Fl, Ar, ...: their words
    close_section()
    return title, sections


def troff_text(text: str) -> str:
    def replace(match: re.Match[str]) -> str:
        escape = match.group(1)
        if escape.startswith("["):
            return _TROFF_CHARACTERS.get(escape[1:-1], "")
        if escape.startswith("("):
            return _TROFF_CHARACTERS.get(escape[1:], "")
        if escape[0] in "fF*nsgkmhvwoxlLbDNRZCX" and len(escape) > 1:
            return ""
        return _TROFF_SIMPLE.get(escape, escape)

    return _TROFF_ESCAPE.sub(replace, text)


# A macro's arguments: words, or "quoted words" in which "" is a quote.
_TROFF_ARGUMENT = re.compile(r'"((?:[^"]|"")*)(?:"|$)|(\S+)')


def _troff_arguments(rest: str) -> list[str]:
    return [troff_text(quoted.replace('""', '"') if quoted else word) for quoted, word in _TROFF_ARGUMENT.findall(rest)]


class SharedKnowledge:
    """The store as the planner asks it: opened per question, so other processes can use it between.

    The first question also brings the store's runbooks in line with the library in use (unless
    ``sync_runbooks`` is false: check mode writes nothing).
    """

    def __init__(self, directory: str | Path, embedder: Embedder, library: RunbookLibrary, *, sync_runbooks: bool = True) -> None:
        self.directory = Path(directory).expanduser()
        self.embedder = embedder
        self.library = library
        self._synced = not sync_runbooks

    def query(self, text: str, k: int = 4) -> list[Hit]:
        with Knowledge(self.directory, self.embedder) as knowledge:
            if not self._synced:
                knowledge.sync_runbooks(self.library)
                self._synced = True
            return knowledge.query(text, k)
