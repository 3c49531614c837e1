"""The knowledge base: real ChromaDB on disk, the real MiniLM model, the shipped runbooks."""

from __future__ import annotations

import gzip
import json
import os
import re
import subprocess
import sys
from pathlib import Path
from typing import Any, Callable, Iterator, Sequence

import pytest
from knowledge_samples import NGINX_GUIDE, NGINX_MAN, POSTGRES_NOTES

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.embeddings import MiniLMEmbedder
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.knowledge import Knowledge, resolve_documents
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.runbooks import RunbookLibrary
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import KnowledgeError


class NamedEmbedder:
    """Another model as far as the store can tell: the same vectors under another name."""

    def __init__(self, inner: MiniLMEmbedder, name: str) -> None:
        self.inner = inner
        self._name = name

    @property
    def name(self) -> str:
        return self._name

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        return self.inner.embed(texts)


@pytest.fixture(scope="module")
def minilm() -> MiniLMEmbedder:
    return MiniLMEmbedder()


@pytest.fixture(scope="module")
def runbooks() -> RunbookLibrary:
    return RunbookLibrary.load()


@pytest.fixture
def docs(tmp_path: Path) -> Path:
    directory = tmp_path / "docs"
    directory.mkdir()
    (directory / "nginx.md").write_text(NGINX_GUIDE)
    (directory / "postgres.txt").write_text(POSTGRES_NOTES)
    (directory / "nginx.8.gz").write_bytes(gzip.compress(NGINX_MAN.encode()))
    (directory / "diagram.png").write_bytes(b"\x89PNG")  # not a supported type: skipped when walking
    (directory / ".git").mkdir()
    (directory / ".git" / "HEAD.md").write_text("# hidden\n")
    return directory


@pytest.fixture
def knowledge(tmp_path: Path, minilm: MiniLMEmbedder) -> Iterator[Knowledge]:
    with Knowledge(tmp_path / "state" / "knowledge", minilm) as store:
        yield store


def chunk_ids(store: Knowledge) -> list[str]:
    collection = store._existing()
    return sorted(collection.get(include=[])["ids"]) if collection is not None else []


def test_a_pasted_error_finds_the_runbook_that_handles_it(knowledge: Knowledge, docs: Path, runbooks: RunbookLibrary) -> None:
    knowledge.sync_runbooks(runbooks)
    knowledge.ingest([docs])
    hits = knowledge.query("nginx bind() to 0.0.0.0:80 failed (98: Address already in use)", k=3)
    assert "port-conflict" in [hit.runbook for hit in hits]
    port_conflict = next(hit for hit in hits if hit.runbook == "port-conflict")
    assert port_conflict.source == "runbook"
    assert port_conflict.path.endswith("runbooks/port-conflict.md")
    assert port_conflict.document == "runbook:port-conflict"
    assert [hit.score for hit in hits] == sorted((hit.score for hit in hits), reverse=True)

    # the postgres runbooks' chunks score within a hair of the page (in one full run on a loaded machine they filled the
    # top three): the page must be among the first five
    checkpoint = knowledge.query("postgres checkpoints are occurring too frequently", k=5)
    assert str(docs / "postgres.txt") in [hit.document for hit in checkpoint]
    test_config = knowledge.query("how do I test the nginx configuration without starting it", k=4, where={"source": "file"})
    assert {hit.source for hit in test_config} == {"file"}
    assert str(docs / "nginx.8.gz") in [hit.document for hit in test_config]


def test_ingest_reports_per_document_and_skips_what_it_cannot_read(knowledge: Knowledge, docs: Path) -> None:
    report = knowledge.ingest([docs])
    assert report.changed
    by_document = {change.document: change for change in report.documents}
    assert sorted(by_document) == sorted(str(docs / name) for name in ("nginx.md", "postgres.txt", "nginx.8.gz"))
    assert {change.status for change in report.documents} == {"added"}
    assert report.totals()["added"] == knowledge.count() == len(chunk_ids(knowledge))
    listed = {info.document: info for info in knowledge.documents()}
    assert listed[str(docs / "nginx.8.gz")].title == "NGINX(8)"
    assert listed[str(docs / "nginx.8.gz")].format == "man"
    assert listed[str(docs / "nginx.md")].title == "nginx on the web tier"
    assert listed[str(docs / "postgres.txt")].chunks == 1


def test_ingesting_again_changes_nothing(knowledge: Knowledge, docs: Path, runbooks: RunbookLibrary) -> None:
    knowledge.sync_runbooks(runbooks)
    knowledge.ingest([docs])
    ids = chunk_ids(knowledge)

    again = knowledge.ingest([docs])
    runbooks_again = knowledge.sync_runbooks(runbooks)
    assert not again.changed and not runbooks_again.changed
    assert {change.status for change in again.documents + runbooks_again.documents} == {"unchanged"}
    assert again.totals()["unchanged"] + runbooks_again.totals()["unchanged"] == len(ids)
    assert chunk_ids(knowledge) == ids


def test_a_changed_file_is_updated_in_place(knowledge: Knowledge, docs: Path) -> None:
    guide = docs / "nginx.md"
    knowledge.ingest([guide])
    before = chunk_ids(knowledge)
    guide.write_text(NGINX_GUIDE.replace("access logs rotate daily at 03:00", "access logs rotate hourly"))

    report = knowledge.ingest([guide])
    (change,) = report.documents
    assert (change.status, change.added, change.updated, change.removed) == ("updated", 0, 1, 0)
    assert change.unchanged == len(before) - 1
    assert chunk_ids(knowledge) == before
    logs = knowledge.query("how often do the nginx access logs rotate", k=1, where={"section": "nginx on the web tier > Logs"})
    assert "rotate hourly" in logs[0].text

    guide.write_text("# nginx on the web tier\n\nOnly this is left.\n")
    shrunk = knowledge.ingest([guide]).documents[0]
    assert (shrunk.status, shrunk.updated, shrunk.removed) == ("updated", 1, len(before) - 1)
    assert chunk_ids(knowledge) == [f"{guide}:0"]


def test_check_mode_reports_without_writing(knowledge: Knowledge, docs: Path, runbooks: RunbookLibrary) -> None:
    planned = knowledge.ingest([docs], dry_run=True)
    assert planned.changed and planned.totals()["added"] > 0
    assert knowledge.sync_runbooks(runbooks, dry_run=True).totals()["added"] >= len(runbooks.runbooks)
    assert knowledge.count() == 0 and knowledge.documents() == []

    knowledge.ingest([docs])
    count = knowledge.count()
    assert knowledge.drop(dry_run=True).totals()["removed"] == count
    assert knowledge.count() == count


def test_a_logical_name_and_removal_of_files_gone_from_an_ingested_directory(knowledge: Knowledge, docs: Path) -> None:
    knowledge.ingest([docs / "nginx.md"], name="team/nginx")
    assert [info.document for info in knowledge.documents()] == ["team/nginx"]
    assert all(chunk_id.startswith("team/nginx:") for chunk_id in chunk_ids(knowledge))

    knowledge.ingest([docs])
    (docs / "postgres.txt").unlink()
    report = knowledge.ingest([docs])
    removed = [change for change in report.documents if change.status == "removed"]
    assert [change.document for change in removed] == [str(docs / "postgres.txt")]
    assert str(docs / "postgres.txt") not in [info.document for info in knowledge.documents()]
    assert "team/nginx" in [info.document for info in knowledge.documents()]  # named: not a file of the directory's walk


def test_drop_a_document_or_everything(knowledge: Knowledge, docs: Path, runbooks: RunbookLibrary) -> None:
    knowledge.sync_runbooks(runbooks)
    knowledge.ingest([docs])
    guide_chunks = next(info.chunks for info in knowledge.documents() if info.document == str(docs / "nginx.md"))

    dropped = knowledge.drop(resolve_documents(knowledge, [docs / "nginx.md"]))
    assert [(change.document, change.removed) for change in dropped.documents] == [(str(docs / "nginx.md"), guide_chunks)]
    assert str(docs / "nginx.md") not in [info.document for info in knowledge.documents()]
    assert not knowledge.drop(["no-such-document"]).changed

    assert sorted(resolve_documents(knowledge, [docs])) == sorted([str(docs), str(docs / "postgres.txt"), str(docs / "nginx.8.gz")])
    assert knowledge.drop(resolve_documents(knowledge, name="runbook:port-conflict")).documents[0].status == "removed"
    assert [change.document for change in knowledge.drop("runbook:redis-killed").documents] == ["runbook:redis-killed"]
    everything = knowledge.drop()
    assert everything.changed
    assert knowledge.count() == 0 and knowledge.documents() == [] and knowledge.query("nginx") == []


def test_the_store_persists_across_clients(tmp_path: Path, minilm: MiniLMEmbedder, docs: Path) -> None:
    with Knowledge(tmp_path / "knowledge", minilm) as first:
        first.ingest([docs])
        documents = first.documents()
        ids = chunk_ids(first)
    with Knowledge(tmp_path / "knowledge", minilm) as second:
        assert second.documents() == documents
        assert chunk_ids(second) == ids
        assert second.query("postgres checkpoint", k=1)[0].document == str(docs / "postgres.txt")
        assert not second.ingest([docs]).changed


def test_a_store_built_by_another_model_is_refused_but_can_be_dropped(tmp_path: Path, minilm: MiniLMEmbedder, docs: Path) -> None:
    directory = tmp_path / "knowledge"
    with Knowledge(directory, minilm) as store:
        store.ingest([docs / "postgres.txt"])
    with Knowledge(directory, NamedEmbedder(minilm, "openai:text-embedding-3-small")) as other:
        for operation in (lambda: other.query("x"), lambda: other.ingest([docs / "nginx.md"])):
            with pytest.raises(KnowledgeError) as refused:
                operation()
            assert str(directory) in str(refused.value)
            assert "all-MiniLM-L6-v2" in str(refused.value) and "openai:text-embedding-3-small" in str(refused.value)
            assert refused.value.field == "embeddings"
        assert [info.document for info in other.documents()] == [str(docs / "postgres.txt")]
        assert other.drop().changed
        other.ingest([docs / "nginx.md"])  # an empty store takes the new model
        assert other.query("nginx reload", k=1)[0].document == str(docs / "nginx.md")


@pytest.mark.parametrize(
    ("make", "message"),
    [
        (lambda d: d / "missing.md", "no such file"),
        (lambda d: d / "diagram.png", "unsupported file type"),
    ],
)
def test_unreadable_or_unsupported_paths_name_the_path(knowledge: Knowledge, docs: Path, make: Callable[[Path], Path], message: str) -> None:
    path = make(docs)
    with pytest.raises(KnowledgeError, match=message) as failure:
        knowledge.ingest([path])
    assert (failure.value.field, failure.value.value) == ("paths", str(path))


def test_a_corrupt_man_page_and_misused_names_are_errors(knowledge: Knowledge, docs: Path) -> None:
    (docs / "broken.8.gz").write_bytes(b"not gzip at all")
    with pytest.raises(KnowledgeError, match="cannot read the file"):
        knowledge.ingest([docs / "broken.8.gz"])
    with pytest.raises(KnowledgeError) as two_paths:
        knowledge.ingest([docs / "nginx.md", docs / "postgres.txt"], name="both")
    assert two_paths.value.field == "name"
    with pytest.raises(KnowledgeError):
        knowledge.ingest([docs / "nginx.md"], name="runbook:port-conflict")
    with pytest.raises(KnowledgeError) as bad_k:
        knowledge.query("x", k=0)
    assert bad_k.value.field == "k"


def test_runbook_chunks_say_which_runbook_and_what_it_does(knowledge: Knowledge, runbooks: RunbookLibrary) -> None:
    report = knowledge.sync_runbooks(runbooks)
    assert sorted(change.document for change in report.documents) == sorted(f"runbook:{runbook.id}" for runbook in runbooks.runbooks)
    first = knowledge.query("another process holds the port: kill -TERM the owner", k=8, where={"runbook": "port-conflict"})
    assert first and {hit.runbook for hit in first} == {"port-conflict"}
    assert any("kill -TERM {squatter}" in hit.text for hit in first)

    fewer = RunbookLibrary([runbook for runbook in runbooks.runbooks if runbook.id != "redis-killed"])
    removed = [change for change in knowledge.sync_runbooks(fewer).documents if change.status == "removed"]
    assert [change.document for change in removed] == ["runbook:redis-killed"]


class FailingEmbedder:
    name = "openai:down"

    def embed(self, texts: Sequence[str]) -> list[list[float]]:
        raise KnowledgeError("the embeddings endpoint failed", field="embeddings.base_url", value="http://127.0.0.1:9/v1")


def test_a_failing_model_leaves_no_store_behind(tmp_path: Path, minilm: MiniLMEmbedder, docs: Path) -> None:
    with Knowledge(tmp_path / "knowledge", FailingEmbedder()) as down, pytest.raises(KnowledgeError, match="endpoint failed"):
        down.ingest([docs])
    with Knowledge(tmp_path / "knowledge", minilm) as store:
        assert store.ingest([docs / "postgres.txt"]).changed  # not refused as a store of openai:down


# -- the Ansible surface -------------------------------------------------------------------------------


def run_playbook(state_dir: Path, *arguments: str) -> dict[str, Any]:
    """playbooks/knowledge.yml on localhost; the result of its knowledge task."""
    root = Path(__file__).resolve().parents[5]
    environment = {**os.environ, "ANSIBLE_CONFIG": str(root / "ansible.cfg"), "ANSIBLE_CALLBACK_RESULT_FORMAT": "json"}
    playbook = [str(Path(sys.executable).parent / "ansible-playbook"), "-v", str(root / "playbooks" / "knowledge.yml")]
    command = [*playbook, "-e", f"autoheal_state_dir={state_dir}", *arguments]
    finished = subprocess.run(command, cwd=root, env=environment, capture_output=True, text=True, timeout=120, check=False)
    result = re.search(r"^(?:ok|changed|fatal): \[localhost\]:?(?: FAILED!)? => (\{.*\})$", finished.stdout, re.MULTILINE)
    assert result, finished.stdout + finished.stderr
    return json.loads(result.group(1))  # type: ignore[no-any-return]


def test_the_playbook_ingests_in_check_mode_without_writing_then_answers_a_query(tmp_path: Path, docs: Path, minilm: MiniLMEmbedder) -> None:
    planned = run_playbook(tmp_path, "-e", "knowledge_operation=ingest", "-e", f"knowledge_paths={docs}", "--check")
    assert planned["changed"] and planned["added"] > 0
    assert {change["status"] for change in planned["documents"]} == {"added"}
    with Knowledge(tmp_path / "knowledge", minilm) as store:
        assert store.count() == 0

    error = "bind() to 0.0.0.0:80 failed (98: Address already in use)"
    answered = run_playbook(tmp_path, "-e", "knowledge_operation=query", "-e", f"knowledge_text='{error}'", "-e", "knowledge_k=3")
    assert answered["changed"]  # the runbooks were ingested first
    assert "port-conflict" in [hit["runbook"] for hit in answered["hits"]]

    failed = run_playbook(tmp_path, "-e", "knowledge_operation=ingest", "-e", f"knowledge_paths={docs / 'diagram.png'}")
    assert "unsupported file type" in failed["msg"] and "diagram.png" in failed["msg"]
