"""Test helpers: where the server binary is, and the known-answer vectors in the repository's
``tests/vectors`` folder (the same files the Rust tests read). A missing vector file is an
error, never a skip."""

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
    """The repository's ``tests/vectors`` folder; raises when it is missing."""
    d = REPO / "tests" / "vectors"
    if not d.is_dir():
        raise FileNotFoundError(f"the vectors folder {d} is missing from the repository")
    return d


def load_vector(name: str):
    with open(vectors_dir() / name, encoding="utf-8") as f:
        return json.load(f)
