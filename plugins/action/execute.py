# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)
"""Action plugin of sentinel.heal.execute: runs stored plans a human approved, on their own host
(plugin_utils/tasks/approved.py)."""

from __future__ import annotations

from ansible_collections.sentinel.heal.plugins.plugin_utils.tasks.approved import ApprovedPlansAction


class ActionModule(ApprovedPlansAction):
    """Every plan checked before any runs; each run under the limits a heal honours."""
