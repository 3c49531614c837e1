"""The knowledge base: the operator's own documents and the runbooks, searchable by meaning.

A ChromaDB store on the controller (``<state_dir>/knowledge``, beside the memory) holds one
collection of chunks with vectors from our own embedder: ChromaDB is given the vectors, never an
embedding function of its own, so nothing is downloaded and a store always answers in the space it
was built in. The embedder's name is kept in the collection's metadata and a store is refused by
another model.

The documents (Markdown, plain text and man pages, and the runbooks) are documents.py's, how they are cut
chunking.py's, what an ingest changes ingest.py's; this module is the store: opening it, writing what an ingest
planned, listing and dropping documents, and the query.

A query takes the chunks nearest in meaning as candidates and ranks them again by the words they
share with the query, so that an error message pasted as the query finds the text that quotes it.
"""

from __future__ import annotations

import fcntl
import re
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Mapping, cast

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.documents import (
    RUNBOOK_PREFIX,
    DocumentInfo,
    SourceDocument,
    document_name,
    read_document,
    runbook_document,
    walk,
)
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.embeddings import Embedder
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.ingest import DocumentChange, IngestPlan, IngestReport, plan_document, plan_removal
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import KnowledgeError
from ansible_collections.sentinel.heal.plugins.plugin_utils.store.filesystems import network_filesystem

if TYPE_CHECKING:
    from chromadb.api.client import Client
    from chromadb.api.models.Collection import Collection

KNOWLEDGE_DIR = "knowledge"
COLLECTION = "sentinel-heal"
# Retrieval: this many vector candidates per hit asked for are ranked again with the query's words.
CANDIDATES_PER_HIT = 8
MIN_CANDIDATES = 32
LEXICAL_WEIGHT = 0.3
_TERM = re.compile(r"[a-z0-9](?:[a-z0-9._:/-]*[a-z0-9])?")
_STOP_WORDS = frozenset({
    "a", "an", "and", "are", "as", "at", "be", "by", "for", "from", "has", "have", "in", "is", "it", "its", "of", "on", "or", "that",
    "the", "this", "to", "was", "with",
})


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
        plan = IngestPlan()
        for document in documents:
            plan_document(collection, document, plan)
        seen = {document.document for document in documents}
        for info in self.documents(source="file") if walked else ():
            if info.document not in seen and not Path(info.path).exists() and any(_is_within(Path(info.path), d) for d in walked):
                plan_removal(collection, info, plan)
        return self._apply(plan, dry_run)

    def sync_runbooks(self, library: RunbookLibrary | None = None, *, dry_run: bool = False) -> IngestReport:
        """Make the stored runbooks those of ``library`` (the shipped ones by default): add, update, remove."""
        documents = [runbook_document(runbook) for runbook in (library if library is not None else RunbookLibrary.load()).runbooks]
        collection = self._readable()
        plan = IngestPlan()
        for document in documents:
            plan_document(collection, document, plan)
        current = {document.document for document in documents}
        for info in self.documents(source="runbook"):
            if info.document not in current:
                plan_removal(collection, info, plan)
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

    def _apply(self, plan: IngestPlan, dry_run: bool) -> IngestReport:
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


def resolve_documents(knowledge: Knowledge, paths: Iterable[str | Path] = (), name: str | None = None) -> list[str]:
    """The stored documents that ``paths`` (files, or directories: every document below) and ``name`` refer to."""
    wanted = [name] if name else []
    stored = knowledge.documents()
    for path in paths:
        resolved = Path(document_name(path))
        wanted.append(str(resolved))
        wanted.extend(info.document for info in stored if info.source == "file" and _is_within(Path(info.path), resolved))
    return list(dict.fromkeys(wanted))


def _document_name(name: str | None, directory: Path, file: Path) -> str | None:
    return f"{name}/{file.relative_to(directory).as_posix()}" if name else None


def terms(text: str) -> set[str]:
    """The words of a text as a query matches them: lower case, numbers, paths and addresses whole (0.0.0.0:80)."""
    return {term for term in _TERM.findall(text.lower()) if term not in _STOP_WORDS}


def _is_within(path: Path, directory: Path) -> bool:
    return path == directory or directory in path.parents


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
