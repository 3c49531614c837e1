# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.memory, deprecated: each operation is done by the module that replaces it
(plugin_utils/tasks/memory_legacy.py), with a deprecation warning that names that module and its form."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.memory_legacy import LegacyMemoryAction


class ActionModule(LegacyMemoryAction):
    """Deprecated: memory_info, memory_export, memory_prune, approval, suspension, flapping_reset and silence."""
