"""Shared test helpers: where the server binary is, and the shared known-answer vectors
(``HITL_LEDGER_VECTORS`` when set, else the ``shared/vectors`` folder beside the repository, as
the Rust tests find them)."""

from __future__ import annotations

import json
import os
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
DEFAULT_BIN = Path.home() / ".cache" / "hitl-ledger" / "target" / "debug" / "hitl-ledger"


def ledger_bin() -> Path:
    """The server binary under test: ``$HITL_LEDGER_BIN``, else the lead's debug build."""
    return Path(os.environ.get("HITL_LEDGER_BIN") or DEFAULT_BIN)


def vectors_dir() -> Path:
    env = os.environ.get("HITL_LEDGER_VECTORS")
    if env:
        return Path(env)
    for candidate in (REPO.parent / "shared" / "vectors", REPO / "shared" / "vectors"):
        if candidate.is_dir():
            return candidate
    raise FileNotFoundError(
        f"shared vectors not found beside {REPO}; set HITL_LEDGER_VECTORS to their folder"
    )


def load_vector(name: str):
    with open(vectors_dir() / name, encoding="utf-8") as f:
        return json.load(f)
