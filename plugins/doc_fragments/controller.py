# Copyright: sentinel.heal contributors
# GNU General Public License v3.0+ (see https://www.gnu.org/licenses/gpl-3.0.txt)

from __future__ import annotations


class ModuleDocFragment:
    """What the sentinel.heal actions that run on the controller share."""

    # The controller's state (sentinel.heal.controller).
    DOCUMENTATION = r"""
options:
  state_dir:
    description: Directory on the controller of the memory (C(memory.sqlite3)), the run artifacts and the knowledge base.
    type: path
    default: ~/.local/state/sentinel-heal
"""

    # How such an action behaves (sentinel.heal.controller.attributes).
    ATTRIBUTES = r"""
attributes:
  action:
    support: full
  async:
    support: none
  bypass_host_loop:
    support: none
  check_mode:
    support: full
  diff_mode:
    support: none
  platform:
    support: full
    platforms: posix
"""
