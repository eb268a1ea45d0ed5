"""The structured-reasons known-answer vectors (tests/vectors/reasons.json) against both
verifiers.

The file is data; tests/interop/reasons_vectors.py wrote it and writes the same bytes again
(checked first, so an edit of either shows). Then every expectation is checked: each record
form's leaf, leaf hash and envelope, each policy document's validity and digest, each tool's
list, and each bundle's verdict by the independent Python verifier and by
`hitl-ledger verify-export` (``$HITL_LEDGER_BIN``), which must both give it. The checksum is
the one recorded in tests/vectors/README.md (and in src/test_vectors.rs). A missing file or
binary fails; nothing skips.

Run: python3 -m pytest tests/interop (needs `cryptography`, `rfc8785`, `pytest`).
"""

from __future__ import annotations

import hashlib
import json
import re
import sys
from pathlib import Path

import pytest
import rfc8785

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import reasons_vectors as rv  # noqa: E402
import test_governance_vectors as tg  # noqa: E402  (verify-export through the binary)
import verify_bundle as vb  # noqa: E402

FILE = HERE.parents[1] / "tests" / "vectors" / "reasons.json"
DATA = FILE.read_bytes()
V = json.loads(DATA)


def test_the_file_is_what_the_generator_writes():
    assert rv.gv.render(rv.build()) == DATA, "tests/vectors/reasons.json differs from reasons_vectors.py's output"


def test_the_checksum_is_the_recorded_one():
    readme = (FILE.parent / "README.md").read_text("utf-8")
    row = next(line for line in readme.splitlines() if line.startswith("| `reasons.json`"))
    assert re.findall(r"`([0-9a-f]{64})`", row) == [hashlib.sha256(DATA).hexdigest()], row


def test_both_forms_of_both_kinds_are_there():
    assert {r["form"] for r in V["records"]} == {
        "rejection_with_reason_code", "rejection_without_reason_code",
        "revocation_with_reason_code", "revocation_without_reason_code"}
    assert V["default_reason_codes"] == ["wrong_amount", "wrong_payee", "not_authorized", "duplicate",
                                         "policy_violation", "other"]


@pytest.mark.parametrize("case", V["records"], ids=[r["form"] for r in V["records"]])
def test_record_forms(case):
    leaf = case["leaf"].encode("utf-8")
    assert rfc8785.dumps(case["record"]) == leaf
    assert hashlib.sha256(b"\x00" + leaf).hexdigest() == case["leaf_hash"]
    rec = vb.parse_leaf(leaf)
    assert vb.check_envelope(rec) is None, vb.check_envelope(rec)
    assert ("reason_code" in rec["body"]) is case["form"].endswith("_with_reason_code")


@pytest.mark.parametrize("case", V["policy_documents"], ids=[p["name"] for p in V["policy_documents"]])
def test_policy_documents(case):
    canonical = case["canonical"].encode("utf-8")
    doc = vb.parse_leaf(canonical)
    assert rfc8785.dumps(doc) == canonical
    why = vb.validate_policy(doc)
    assert (why is None) == case["valid"], (case["name"], why)
    if case["valid"]:
        assert vb.policy_digest(doc) == case["policy_digest"] == "sha256:" + hashlib.sha256(canonical).hexdigest()


def test_reason_code_lists():
    docs = {p["name"]: p["document"] for p in V["policy_documents"] if p["valid"]}
    assert len(V["reason_codes"]) >= 6
    for c in V["reason_codes"]:
        assert vb.reason_codes(docs[c["document"]], c["tool"]) == c["reason_codes"], c


@pytest.mark.parametrize("case", V["bundles"], ids=[b["name"] for b in V["bundles"]])
def test_bundles_with_both_verifiers(case):
    exp = case["expect"]
    data = json.dumps(case["bundle"]).encode()
    for who, (status, result) in (("python", (None, vb.verify_bundle_bytes(data, V["verifier_key"]))),
                                  ("rust", tg._rust(case["bundle"]))):
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


def test_bundles_cover_rule_13_for_both_kinds():
    names = [b["name"] for b in V["bundles"] if b["expect"].get("rule") == "13"]
    assert any("rejection" in n for n in names) and any("revocation" in n for n in names), names
    assert sum(b["expect"]["ok"] is True for b in V["bundles"]) >= 2
