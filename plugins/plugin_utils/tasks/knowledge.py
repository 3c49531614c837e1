"""What sentinel.heal.knowledge does to the controller's knowledge base (ChromaDB on disk, beside the memory): ingest
documents, query them, list and drop them. The shipped runbooks are kept in the store on ingest and query (cheap when
they did not change); check mode changes nothing and says what would change."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.embeddings import EMBEDDINGS_OPTION, embedder_from_options
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.ingest import IngestReport
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.knowledge import KNOWLEDGE_DIR, Knowledge, resolve_documents
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import SentinelError
from ansible_collections.sentinel.heal.plugins.plugin_utils.loop.options import STATE_DIR_OPTION

KNOWLEDGE_SPEC: dict[str, Any] = dict(
    operation=dict(type="str", required=True, choices=["ingest", "query", "list", "drop"]),
    paths=dict(type="list", elements="path", default=[]),
    name=dict(type="str"),
    text=dict(type="str"),
    k=dict(type="int", default=4),
    state_dir=STATE_DIR_OPTION,
    embeddings=EMBEDDINGS_OPTION,
    include_runbooks=dict(type="bool", default=True),
)


class KnowledgeAction(ActionBase):
    """The action of sentinel.heal.knowledge."""

    TRANSFERS_FILES = False
    _requires_connection = False
    argument_spec: dict[str, Any] = KNOWLEDGE_SPEC

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=self.argument_spec, required_if=[("operation", "query", ["text"])])
        store = Path(args["state_dir"]) / KNOWLEDGE_DIR
        try:
            with Knowledge(store, embedder_from_options(args["embeddings"])) as knowledge:
                result.update(operate(knowledge, args, dry_run=bool(self._task.check_mode)))
        except SentinelError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        result["store"] = str(store)
        return result


def operate(knowledge: Knowledge, args: dict[str, Any], dry_run: bool) -> dict[str, Any]:
    """The task's result of its ``operation`` on ``knowledge``; ``dry_run``: what it would change, nothing changed."""
    operation = args["operation"]
    if operation == "list":
        documents = knowledge.documents()
        return {"changed": False, "documents": [info.to_dict() for info in documents], "chunks": sum(info.chunks for info in documents)}
    if operation == "drop":
        everything = not (args["paths"] or args["name"])
        report = knowledge.drop(None if everything else resolve_documents(knowledge, args["paths"], args["name"]), dry_run=dry_run)
        return report.to_dict()
    report = knowledge.sync_runbooks(dry_run=dry_run) if args["include_runbooks"] else IngestReport()
    if operation == "ingest":
        if args["paths"]:
            report.extend(knowledge.ingest(args["paths"], args["name"], dry_run=dry_run))
        return report.to_dict()
    hits = knowledge.query(args["text"], k=args["k"])
    return {"changed": report.changed, "hits": [hit.to_dict() for hit in hits]}
