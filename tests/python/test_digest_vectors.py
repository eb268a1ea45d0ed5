"""Fast unit tests: the client's JCS and action digest against the known-answer vectors in tests/vectors.

These need no server. The same cases are checked by the Rust canonicalizer (src/format/jcs.rs), so a
pass here means the client and the ledger digest every case identically.
"""

from __future__ import annotations

import json
import math
import struct

import pytest
from hitl_ledger import digest
from hitl_ledger.errors import NotCanonicalizable
from ledger_support import load_vector

JCS = load_vector("jcs.json")
ACTIONS = load_vector("action_digest.json")["cases"]

# Cases whose integer literals exceed ±(2^53-1): strict mode (request bodies) refuses them,
# exactly as the Rust canonicalizer's strict mode does (src/format/jcs.rs, STRICT_UNSAFE).
STRICT_UNSAFE = [
    "rfc8785/appendix-b/4340000000000000",
    "rfc8785/appendix-b/c340000000000000",
    "es6testfile/readme-sample/4340000000000001",
    "es6testfile/readme-sample/4340000000000002",
    "number/int-2^53+1-rounds-to-even",
    "number/int-2^53+3-rounds-to-even",
    "number/int64-max",
    "rfc8785/appendix-d-without-giant",
]


def test_vector_counts():
    assert len(JCS) == 98
    assert sum(1 for c in JCS if c["expect_error"]) == 8
    assert len(ACTIONS) >= 9


@pytest.mark.parametrize("case", [c for c in JCS if not c["expect_error"]], ids=lambda c: c["name"])
def test_jcs_canonical(case):
    got = digest.canonicalize_text(case["input"])
    assert got == case["canonical"].encode("utf-8")
    if "canonical_utf8_hex" in case:
        assert got.hex() == case["canonical_utf8_hex"]


@pytest.mark.parametrize(
    "case",
    [c for c in JCS if c["expect_error"] and c["input"] is not None],
    ids=lambda c: c["name"],
)
def test_jcs_errors(case):
    for strict in (False, True):
        with pytest.raises(NotCanonicalizable):
            digest.canonicalize_text(case["input"], strict=strict)


@pytest.mark.parametrize(
    "case", [c for c in JCS if c["input"] is None], ids=lambda c: c["name"]
)
def test_jcs_non_finite(case):
    value = struct.unpack(">d", bytes.fromhex(case["ieee754_hex"]))[0]
    assert not math.isfinite(value)
    with pytest.raises(NotCanonicalizable):
        digest.canonicalize(value)
    with pytest.raises(NotCanonicalizable):
        digest.canonicalize({"args": {"x": value}, "tool": "t"})


@pytest.mark.parametrize(
    "case", [c for c in JCS if "ieee754_hex" in c and c["canonical"]], ids=lambda c: c["name"]
)
def test_jcs_number_from_bits(case):
    value = struct.unpack(">d", bytes.fromhex(case["ieee754_hex"]))[0]
    assert digest.canonicalize(value).decode() == case["canonical"]


def test_strict_mode_refuses_exactly_the_unsafe_integers():
    refused = []
    for case in JCS:
        if case["expect_error"]:
            continue
        try:
            strict = digest.canonicalize_text(case["input"], strict=True)
        except NotCanonicalizable:
            refused.append(case["name"])
            continue
        assert strict == case["canonical"].encode("utf-8"), case["name"]
    assert refused == STRICT_UNSAFE


@pytest.mark.parametrize("case", ACTIONS, ids=lambda c: c["name"])
def test_action_digest(case):
    assert digest.canonicalize(case["action"]) == case["canonical"].encode("utf-8")
    assert digest.action_digest(case["action"]) == case["digest"]


@pytest.mark.parametrize(
    "value",
    [
        {"tool": "t", "args": {"n": 2**53}},
        {"tool": "t", "args": {"n": -(2**53)}},
        {"tool": "t", "args": {"n": float("nan")}},
        {"tool": "t", "args": {"n": float("inf")}},
        {"tool": "t", "args": {"s": "\ud800"}},
        {"tool": "t", "args": {"\udead": 1}},
        {"tool": "t", "args": {1: "non-string key"}},
        {"tool": "t", "args": {"x": object()}},
    ],
    ids=["2^53", "-2^53", "nan", "inf", "lone-surrogate", "lone-surrogate-key", "int-key",
         "object"],
)
def test_python_values_the_ledger_refuses(value):
    with pytest.raises(NotCanonicalizable):
        digest.canonicalize(value)
    with pytest.raises(ValueError):
        digest.action_digest(value)


def test_python_safe_integer_edges():
    assert digest.canonicalize(2**53 - 1) == b"9007199254740991"
    assert digest.canonicalize(-(2**53 - 1)) == b"-9007199254740991"


@pytest.mark.parametrize(
    "text", ['{"a":1,"a":2}', '{"x":{"b":true,"b":true}}', "[NaN]", "[Infinity]", "[-1e400]"]
)
def test_strict_loads_refuses(text):
    with pytest.raises(NotCanonicalizable):
        digest.loads_strict(text)


@pytest.mark.parametrize(
    "bad",
    [[], {"tool": "t"}, {"tool": "", "args": {}}, {"tool": "t", "args": []},
     {"tool": "t", "args": {}, "extra": 1}, {"tool": 3, "args": {}}],
)
def test_action_shape(bad):
    with pytest.raises(ValueError):
        digest.action_digest(bad)


def test_idempotency_key_matches_its_definition():
    # hex(SHA-256(JCS({"origin": ORIGIN, "request_id": REQUEST_ID}))), computed independently.
    import hashlib

    text = json.dumps({"origin": "example.org/ledger", "request_id": "r-1"}, sort_keys=True,
                      separators=(",", ":"))
    assert digest.idempotency_key("example.org/ledger", "r-1") == hashlib.sha256(
        text.encode()).hexdigest()


def test_leaf_hash_is_rfc6962():
    merkle = load_vector("merkle_rfc6962.json")
    for leaf_hex, expected in zip(merkle["leaves_hex"], merkle["leaf_hashes"], strict=True):
        assert digest.leaf_hash(bytes.fromhex(leaf_hex)) == expected
