# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.diagnose: what memory, the runbooks and read-only evidence say about the failures
(plugin_utils/tasks/planning.py)."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.loop_action import LoopAction
from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.planning import DIAGNOSE_SPEC, DiagnosisSession


class ActionModule(LoopAction):
    argument_spec = DIAGNOSE_SPEC
    session = DiagnosisSession
