"""The governance known-answer vectors (tests/vectors/governance.json) against both verifiers.

The file is data; tests/interop/governance_vectors.py wrote it and writes the same bytes
again (checked first, so an edit of either shows). Then every expectation is checked: each
record form's leaf and leaf hash and its envelope, each policy document's validity and
digest, each resolution, and each bundle's verdict by the independent Python verifier and by
`hitl-ledger verify-export` (``$HITL_LEDGER_BIN``), which must both give it. The checksum is
the one recorded in tests/vectors/README.md (and in src/test_vectors.rs for the Rust tests,
which read the same file). A missing file or binary fails; nothing skips.

Run: python3 -m pytest tests/interop (needs `cryptography`, `rfc8785`, `pytest`).
"""

from __future__ import annotations

import hashlib
import json
import os
import re
import subprocess
import sys
import tempfile
from pathlib import Path

import pytest
import rfc8785

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import governance_vectors as gv  # noqa: E402
import verify_bundle as vb  # noqa: E402

FILE = HERE.parents[1] / "tests" / "vectors" / "governance.json"
DATA = FILE.read_bytes()
V = json.loads(DATA)
BIN = Path(os.environ.get("HITL_LEDGER_BIN") or Path.home() / ".cache" / "hitl-ledger" / "target" / "debug" / "hitl-ledger")


def test_the_file_is_what_the_generator_writes():
    assert gv.render(gv.build()) == DATA, "tests/vectors/governance.json differs from governance_vectors.py's output"


def test_the_checksum_is_the_recorded_one():
    readme = (FILE.parent / "README.md").read_text("utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| `governance.json`"))
    assert re.findall(r"`([0-9a-f]{64})`", row) == [hashlib.sha256(DATA).hexdigest()], row


def test_every_new_record_form_is_there():
    assert {r["form"] for r in V["records"]} == {
        "policy_initial", "policy_change", "interrupt_with_policy", "partial_approval", "final_approval_with_counts",
        "governed_refusal", "policy_refusal", "break_glass_decision", "review", "tool_paused_authorization",
        "edit_with_approved_as", "edit_partial_approval"}


@pytest.mark.parametrize("case", V["records"], ids=[r["form"] for r in V["records"]])
def test_record_forms(case):
    leaf = case["leaf"].encode("utf-8")
    assert rfc8785.dumps(case["record"]) == leaf
    assert hashlib.sha256(b"\x00" + leaf).hexdigest() == case["leaf_hash"]
    rec = vb.parse_leaf(leaf)
    assert vb.check_envelope(rec) is None, vb.check_envelope(rec)


@pytest.mark.parametrize("case", V["policy_documents"], ids=[p["name"] for p in V["policy_documents"]])
def test_policy_documents(case):
    canonical = case["canonical"].encode("utf-8")
    doc = vb.parse_leaf(canonical)
    assert rfc8785.dumps(doc) == canonical
    why = vb.validate_policy(doc)
    assert (why is None) == case["valid"], (case["name"], why)
    if case["valid"]:
        assert vb.policy_digest(doc) == case["policy_digest"] == "sha256:" + hashlib.sha256(canonical).hexdigest()


def test_resolution():
    docs = {p["name"]: p["document"] for p in V["policy_documents"] if p["valid"]}
    assert len(V["resolution"]) >= 6
    for c in V["resolution"]:
        assert vb.resolve_tool(docs[c["document"]], c["tool"]) == c["resolved"], c


def _rust(bundle: dict) -> tuple[int, dict]:
    assert BIN.is_file(), "the hitl-ledger binary is missing at %s: build it, or set HITL_LEDGER_BIN" % BIN
    with tempfile.NamedTemporaryFile("wb", suffix=".json") as f:
        f.write(json.dumps(bundle).encode())
        f.flush()
        p = subprocess.run([str(BIN), "verify-export", f.name, "--key", V["verifier_key"], "--format", "json"],
                           capture_output=True, timeout=60)
    return p.returncode, json.loads(p.stdout)


@pytest.mark.parametrize("case", V["bundles"], ids=[b["name"] for b in V["bundles"]])
def test_bundles_with_both_verifiers(case):
    exp = case["expect"]
    data = json.dumps(case["bundle"]).encode()
    for who, (status, result) in (("python", (None, vb.verify_bundle_bytes(data, V["verifier_key"]))),
                                  ("rust", _rust(case["bundle"]))):
        assert result["ok"] is exp["ok"], (who, result)
        if exp["ok"]:
            assert result["problem"] is None, (who, result)
            continue
        p = result["problem"]
        assert (p["code"], p["seq"]) == (exp["code"], exp["seq"]), (who, p)
        if "rule" in exp:
            assert "rule %s: " % exp["rule"] in p["message"], (who, p["message"])
        if status is not None:
            assert status == 1, (who, status)


def test_bundles_cover_every_governance_rule():
    rules = {b["expect"].get("rule") for b in V["bundles"]}
    assert {"6f", "8", "9", "10a", "10b", "10c", "10d", "11a", "11b", "12a", "12b", "12c", "12d"} <= rules
    codes = {b["expect"].get("code") for b in V["bundles"]}
    assert {"policy_missing", "thread_gap", "thread_head_mismatch", None} <= codes
