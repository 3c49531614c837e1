"""What an ingest or a drop changes in the knowledge store, per document and counted in chunks, and the writes an ingest
needs, planned from what the store holds before anything is written.

Chunk ids are stable, ``<document>:<n>``, where the document is the resolved path or a logical name, so ingesting
again updates a document in place: chunks whose text changed are embedded again, chunks that no longer exist are
deleted, and a document whose bytes did not change is skipped after one metadata lookup.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import TYPE_CHECKING, Any, Mapping

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.documents import DocumentInfo, SourceDocument

if TYPE_CHECKING:
    from chromadb.api.models.Collection import Collection


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


@dataclass
class IngestPlan:
    """The writes an ingest needs; planned first so that check mode reports exactly what a run would do."""

    report: IngestReport = field(default_factory=IngestReport)
    upserts: list[tuple[str, str, dict[str, str | int]]] = field(default_factory=list)
    metadata_updates: list[tuple[str, dict[str, str | int]]] = field(default_factory=list)
    deletes: list[str] = field(default_factory=list)


def plan_document(collection: Collection | None, document: SourceDocument, plan: IngestPlan) -> None:
    stored = collection.get(where={"document": document.document}, include=["metadatas"]) if collection is not None else None
    stored_metadata = dict(zip(stored["ids"], stored["metadatas"] or [], strict=True)) if stored is not None else {}
    change = DocumentChange(document.document, document.path, document.source, "updated" if stored_metadata else "added")
    plan.report.documents.append(change)
    fingerprints = {metadata.get("fingerprint") for metadata in stored_metadata.values()}
    if fingerprints == {document.fingerprint} and len(stored_metadata) == len(document.chunks):
        change.status, change.unchanged = "unchanged", len(stored_metadata)
        return
    # The bytes changed: embed again only the chunks whose text changed.
    stored_texts = _texts(collection, list(stored_metadata))
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


def _texts(collection: Collection | None, ids: list[str]) -> dict[str, str]:
    if collection is None or not ids:
        return {}
    found = collection.get(ids=ids, include=["documents"])
    return dict(zip(found["ids"], found["documents"] or [], strict=True))


def plan_removal(collection: Collection | None, info: DocumentInfo, plan: IngestPlan) -> None:
    ids = collection.get(where={"document": info.document}, include=[])["ids"] if collection is not None else []
    plan.report.documents.append(DocumentChange(info.document, info.path, info.source, "removed", removed=len(ids)))
    plan.deletes.extend(ids)


def _described(metadata: Mapping[str, Any]) -> dict[str, Any]:
    """What a chunk's metadata says about it, without the fingerprint of the bytes it came from."""
    return {key: value for key, value in metadata.items() if key != "fingerprint"}
