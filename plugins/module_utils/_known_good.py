"""The old name of ``_host/known_good.py``, kept importable for one release (DESIGN.md's contracts): it is that module."""

from __future__ import annotations

import sys

from ansible_collections.sentinel.heal.plugins.module_utils._host import known_good as _moved

sys.modules[__name__] = _moved
