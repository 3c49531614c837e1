# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.knowledge: ingests, queries, lists and drops the controller's knowledge base
(plugin_utils/tasks/knowledge.py)."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.knowledge import KnowledgeAction


class ActionModule(KnowledgeAction):
    """The knowledge base lives in the state directory's knowledge/."""
