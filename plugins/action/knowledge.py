# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.knowledge: ingests, queries, lists and drops the controller's knowledge base."""

from __future__ import annotations

from pathlib import Path
from typing import Any

from ansible.errors import AnsibleActionFail
from ansible.plugins.action import ActionBase

from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.embeddings import EMBEDDINGS_OPTION, embedder_from_options
from ansible_collections.sentinel.heal.plugins.plugin_utils.brain.knowledge import KNOWLEDGE_DIR, IngestReport, Knowledge, resolve_documents
from ansible_collections.sentinel.heal.plugins.plugin_utils.errors import SentinelError

ARGUMENT_SPEC = dict(
    operation=dict(type="str", required=True, choices=["ingest", "query", "list", "drop"]),
    paths=dict(type="list", elements="path", default=[]),
    name=dict(type="str"),
    text=dict(type="str"),
    k=dict(type="int", default=4),
    state_dir=dict(type="path", default="~/.local/state/sentinel-heal"),
    embeddings=EMBEDDINGS_OPTION,
    include_runbooks=dict(type="bool", default=True),
)


class ActionModule(ActionBase):
    TRANSFERS_FILES = False
    _requires_connection = False

    def run(self, tmp: Any = None, task_vars: dict[str, Any] | None = None) -> dict[str, Any]:
        result = super().run(tmp, task_vars)
        _validation, args = self.validate_argument_spec(argument_spec=ARGUMENT_SPEC, required_if=[("operation", "query", ["text"])])
        store = Path(args["state_dir"]) / KNOWLEDGE_DIR
        try:
            with Knowledge(store, embedder_from_options(args["embeddings"])) as knowledge:
                result.update(self._operate(knowledge, args, dry_run=bool(self._task.check_mode)))
        except SentinelError as exc:
            raise AnsibleActionFail(str(exc)) from exc
        result["store"] = str(store)
        return result

    @staticmethod
    def _operate(knowledge: Knowledge, args: dict[str, Any], dry_run: bool) -> dict[str, Any]:
        operation = args["operation"]
        if operation == "list":
            documents = knowledge.documents()
            return {"changed": False, "documents": [info.to_dict() for info in documents], "chunks": sum(info.chunks for info in documents)}
        if operation == "drop":
            everything = not (args["paths"] or args["name"])
            report = knowledge.drop(None if everything else resolve_documents(knowledge, args["paths"], args["name"]), dry_run=dry_run)
            return report.to_dict()
        # Ingest and query keep the shipped runbooks in the store (cheap when they did not change).
        report = knowledge.sync_runbooks(dry_run=dry_run) if args["include_runbooks"] else IngestReport()
        if operation == "ingest":
            if args["paths"]:
                report.extend(knowledge.ingest(args["paths"], args["name"], dry_run=dry_run))
            return report.to_dict()
        hits = knowledge.query(args["text"], k=args["k"])
        return {"changed": report.changed, "hits": [hit.to_dict() for hit in hits]}
