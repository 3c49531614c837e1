"""Make the checkout importable as ansible_collections.sentinel.heal (via the .collections link)."""

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
COLLECTIONS = ROOT / ".collections"

if not (COLLECTIONS / "ansible_collections" / "sentinel" / "heal").exists():
    raise SystemExit(f"{COLLECTIONS}/ansible_collections/sentinel/heal is missing: run `make setup` first")
sys.path.insert(0, str(COLLECTIONS))
sys.path.insert(0, str(ROOT / "tests"))  # llm_server
