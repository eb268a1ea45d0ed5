#!/usr/bin/env python3
"""Generator of tests/vectors/reasons.json: known answers for structured reasons (issue 21, a
v1 extension of docs/protocol.md): a rejection's and a revocation's `reason_code`.

The file holds, computed here from the contract (sections 2.3, 6.2, 6.3 rule 13, 7.2 and 12):

* ``policy_documents``: documents that set ``reason_codes`` (valid, with their canonical text
  and ``policy_digest``), and documents a verifier must find invalid, each naming the clause of
  section 12 it breaks;
* ``reason_codes``: the list in force for a tool under a document (a tool's list replaces the
  default's; where neither sets one, the default list);
* ``records``: a rejection and a revocation with and without ``reason_code``, as the gate
  writes them, with their leaf (RFC 8785 bytes) and leaf hash;
* ``bundles``: export bundles signed with the public test key of signed_note.json
  (``tlog_checkpoint``): a history with codes under two policies that verifies, a bundle with
  codes under no policy record (the default list), and one bundle per forbidden outcome (rule
  13, and the envelope's type of the member), each with the problem a verifier must report.

It reuses the governance generator's builder (tests/interop/governance_vectors.py), so the
records are chained, proven and signed as there. Everything is deterministic, so running this
again writes the same bytes; test_reasons_vectors.py checks that, and checks every expectation
with both verifiers (and tests/browser/test_verify_reasons.py with the console's).

Run: python3 tests/interop/reasons_vectors.py   (writes tests/vectors/reasons.json)
"""

from __future__ import annotations

import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import rfc8785  # noqa: E402

import governance_vectors as gv  # noqa: E402  (the builder, actors and record bodies)
import test_verify_bundle_vectors as gen  # noqa: E402  (the synthetic log and its signing key)
import verify_bundle as vb  # noqa: E402

OUT = HERE.parents[1] / "tests" / "vectors" / "reasons.json"
THREAD = gv.THREAD
T = gv.T
ticket = gv.ticket
AGENT, ALICE, ADMIN, SYSTEM = gv.AGENT, gv.ALICE, gv.ADMIN, gv.SYSTEM

#: Lists of their own: a document default list, and refund's list replacing it.
LISTS = {
    "default": {"reason_codes": ["fraud", "other"]},
    "tools": {"refund": {"reason_codes": ["wrong_amount", "customer_withdrew"]}, "payout": {"mode": "enforce"}},
}
#: The policy change: refund's list is another one.
CHANGED = {
    "default": {"reason_codes": ["fraud", "other"]},
    "tools": {"refund": {"reason_codes": ["duplicate"]}, "payout": {"mode": "enforce"}},
}


def rejection(n: int, code=None) -> dict:
    b = {"rationale": "the amount is wrong", "ticket_id": ticket(n)}
    if code is not None:
        b["reason_code"] = code
    return b


def revocation(code=None) -> dict:
    b = {"reason": "the customer withdrew"}
    if code is not None:
        b["reason_code"] = code
    return b


def history() -> gv.Builder:
    """Codes under two policies, and records without one, all allowed (the record forms come
    from it)."""
    b = gv.Builder()
    b.add("policy_initial", "policy", None, T(0), SYSTEM, gv.policy_body(gv.INITIAL))
    b.add("policy_lists", "policy", None, T(10), ADMIN, gv.policy_body(LISTS))
    b.add("i1", "interrupt", "req-1", T(20), AGENT, gv.interrupt("refund", "int-1", 20, "policy_lists"))
    b.add("rejection_with_reason_code", "rejection", "req-1", T(30), ALICE, rejection(1, "wrong_amount"))
    b.add("i2", "interrupt", "req-2", T(40), AGENT, gv.interrupt("refund", "int-2", 40, "policy_lists"))
    b.add("rejection_without_reason_code", "rejection", "req-2", T(50), ALICE, rejection(2))
    b.add("i3", "interrupt", "req-3", T(60), AGENT, gv.interrupt("payout", "int-3", 60, "policy_lists"))
    b.add("revocation_with_reason_code", "revocation", "req-3", T(70), AGENT, revocation("fraud"))
    b.add("i4", "interrupt", "req-4", T(80), AGENT, gv.interrupt("refund", "int-4", 80, "policy_lists"))
    b.add("a4", "decision", "req-4", T(90), ALICE, gv.approval(ticket(4), T(690)))
    b.add("revocation_without_reason_code", "revocation", "req-4", T(100), AGENT, revocation())
    b.add("policy_changed", "policy", None, T(110), ADMIN, gv.policy_body(CHANGED))
    b.add("i5", "interrupt", "req-5", T(120), AGENT, gv.interrupt("refund", "int-5", 120, "policy_changed"))
    b.add("rejection_under_the_change", "rejection", "req-5", T(130), ALICE, rejection(5, "duplicate"))
    b.add("i6", "interrupt", "req-6", T(140), AGENT, gv.interrupt("refund", "int-6", 140, "policy_changed"))
    b.add("a6", "decision", "req-6", T(150), ALICE, gv.approval(ticket(6), T(750)))
    b.add("revocation_of_an_approval_under_the_change", "revocation", "req-6", T(160), AGENT,
          revocation("duplicate"))
    return b


RECORD_FORMS = [
    ("rejection_with_reason_code", "a rejection naming one of its tool's reason_codes"),
    ("rejection_without_reason_code", "a rejection without a reason code (as before the extension)"),
    ("revocation_with_reason_code", "a revocation of an open request naming one of its tool's reason_codes"),
    ("revocation_without_reason_code", "a revocation of an approved request without a reason code"),
]


def small(*extra) -> gv.Builder:
    """The initial policy, LISTS, an open refund request (req-1) and an approved payout
    request (req-2), then `extra` records (name, kind, request_id, ts, actor, body)."""
    b = gv.Builder()
    b.add("p0", "policy", None, T(0), SYSTEM, gv.policy_body(gv.INITIAL))
    b.add("p1", "policy", None, T(10), ADMIN, gv.policy_body(LISTS))
    b.add("i1", "interrupt", "req-1", T(20), AGENT, gv.interrupt("refund", "int-1", 20, "p1"))
    b.add("i2", "interrupt", "req-2", T(30), AGENT, gv.interrupt("payout", "int-2", 30, "p1"))
    b.add("a2", "decision", "req-2", T(40), ALICE, gv.approval(ticket(2), T(640)))
    for x in extra:
        b.add(*x)
    return b


def no_policy_history() -> gv.Builder:
    """A log with no policy record: the default list is in force."""
    b = gv.Builder()
    b.add("i1", "interrupt", "req-1", T(0), AGENT, gv.interrupt("refund", "int-1", 0, None))
    b.add("r1", "rejection", "req-1", T(10), ALICE, rejection(1, "wrong_payee"))
    b.add("i2", "interrupt", "req-2", T(20), AGENT, gv.interrupt("refund", "int-2", 20, None))
    b.add("v2", "revocation", "req-2", T(30), AGENT, revocation("policy_violation"))
    return b


def bundle_cases() -> list[tuple[str, str, gv.Builder, str | None, dict]]:
    """(name, description, builder, record named by the expectation, expectation)."""
    v = {"ok": False, "code": "rule_violation", "rule": "13"}
    env = {"ok": False, "code": "envelope"}
    change = ("p2", "policy", None, T(50), ADMIN, gv.policy_body(CHANGED))
    return [
        ("reasons_history", "codes under two policies, and records without one", history(), None, {"ok": True}),
        ("no_policy_record_default_list", "codes of the default list under no policy record", no_policy_history(),
         None, {"ok": True}),
        ("rule_13_rejection_code_outside_the_list", "a rejection naming a code no list holds",
         small(("bad", "rejection", "req-1", T(50), ALICE, rejection(1, "made_up"))), "bad", v),
        ("rule_13_rejection_code_of_the_replaced_default", "refund's list replaces the default's: fraud is not in it",
         small(("bad", "rejection", "req-1", T(50), ALICE, rejection(1, "fraud"))), "bad", v),
        ("rule_13_rejection_code_of_the_builtin_default", "the built-in default list is not in force where a document sets one",
         small(("bad", "rejection", "req-1", T(50), ALICE, rejection(1, "wrong_payee"))), "bad", v),
        ("rule_13_rejection_code_not_a_code", "a rejection whose reason_code is not of the form of a code",
         small(("bad", "rejection", "req-1", T(50), ALICE, rejection(1, "Wrong_Amount"))), "bad", v),
        ("rule_13_revocation_of_an_open_request", "a revocation of an open refund naming a code outside its list",
         small(("bad", "revocation", "req-1", T(50), AGENT, revocation("duplicate"))), "bad", v),
        ("rule_13_revocation_of_an_approval", "a revocation of an approved payout naming refund's code",
         small(("bad", "revocation", "req-2", T(50), AGENT, revocation("wrong_amount"))), "bad", v),
        ("rule_13_code_of_the_policy_before_the_change", "a code refund's earlier list held, after the change",
         small(change, ("bad", "rejection", "req-1", T(60), ALICE, rejection(1, "wrong_amount"))), "bad", v),
        ("rule_5c_before_rule_13", "a revocation of a rejected request with a code outside the list: rule 5c",
         small(("r1", "rejection", "req-1", T(50), ALICE, rejection(1)),
               ("bad", "revocation", "req-1", T(60), AGENT, revocation("made_up"))), "bad",
         {"ok": False, "code": "rule_violation", "rule": "5c"}),
        ("envelope_reason_code_not_a_string", "a rejection whose reason_code is a number",
         small(("bad", "rejection", "req-1", T(50), ALICE, rejection(1, 7))), "bad", env),
        ("envelope_reason_code_on_an_approval", "reason_code is not a decision's member",
         small(("bad", "decision", "req-1", T(50), ALICE, dict(gv.approval(ticket(1), T(650)), reason_code="other"))),
         "bad", env),
    ]


def build() -> dict:
    doc: dict = {
        "description": "Known answers for structured reasons (issue 21, a v1 extension of docs/protocol.md): "
                       "reason_codes in policy documents and their resolution, a rejection and a revocation with "
                       "and without reason_code with their leaves and leaf hashes, and export bundles whose "
                       "expected verdicts follow from sections 6.2 and 6.3 (rule 13). Generated by "
                       "tests/interop/reasons_vectors.py.",
        "origin": gen.ORIGIN,
        "verifier_key": gen.KEY,
        "signing_key": "the public test key of signed_note.json (tlog_checkpoint); never use it for anything else",
        "default_reason_codes": vb.DEFAULT_REASON_CODES,
        "notes": [
            "policy_documents: validity is judged on `canonical`, the form a policy record holds (section 12); "
            "`policy_digest` is sha256: + hex SHA-256 of those bytes; `breaks` names the clause of section 12",
            "reason_codes: the list in force for `tool` under the named document (the tool's entry, else the "
            "document's default entry, else default_reason_codes)",
            "records: `leaf` is the record's RFC 8785 text (UTF-8), `leaf_hash` hex SHA-256(0x00 || leaf)",
            "bundles: `expect.ok`, and for a problem its `code` and `seq`; for rule_violation, `rule` is the rule "
            "of section 6.3 the message names",
        ],
    }
    valid = [
        ("initial", gv.INITIAL),
        ("lists", LISTS),
        ("changed", CHANGED),
        ("default_list_spelled_out", {"default": {"reason_codes": list(vb.DEFAULT_REASON_CODES)}}),
        ("longest_code", {"tools": {"refund": {"reason_codes": ["a" + "z" * 63, "x_9"]}}}),
    ]
    doc["policy_documents"] = [
        {"name": n, "valid": True, "document": d, "canonical": rfc8785.dumps(d).decode("utf-8"),
         "policy_digest": vb.policy_digest(d)} for n, d in valid
    ]
    invalid = [
        ("empty_list", {"default": {"reason_codes": []}}, "an empty reason_codes list"),
        ("empty_tool_list", {"tools": {"refund": {"reason_codes": []}}}, "an empty reason_codes list"),
        ("duplicated_code", {"tools": {"refund": {"reason_codes": ["other", "other"]}}}, "a duplicated reason_codes list"),
        ("upper_case_code", {"tools": {"refund": {"reason_codes": ["Other"]}}}, "a malformed code"),
        ("leading_digit", {"tools": {"refund": {"reason_codes": ["1st"]}}}, "a malformed code"),
        ("leading_underscore", {"tools": {"refund": {"reason_codes": ["_x"]}}}, "a malformed code"),
        ("hyphen", {"tools": {"refund": {"reason_codes": ["wrong-amount"]}}}, "a malformed code"),
        ("too_long", {"tools": {"refund": {"reason_codes": ["a" + "z" * 64]}}}, "a malformed code (65 characters)"),
        ("empty_code", {"tools": {"refund": {"reason_codes": [""]}}}, "a malformed code"),
        ("not_a_list", {"tools": {"refund": {"reason_codes": "other"}}}, "a value of the wrong type"),
        ("not_strings", {"tools": {"refund": {"reason_codes": [1]}}}, "a value of the wrong type"),
    ]
    doc["policy_documents"] += [{"name": n, "valid": False, "document": d, "canonical": rfc8785.dumps(d).decode("utf-8"),
                                 "breaks": why} for n, d, why in invalid]
    docs = dict(valid)
    doc["reason_codes"] = [
        {"document": name, "tool": tool, "reason_codes": vb.reason_codes(docs[name], tool)}
        for name, tool in [("initial", "wire_transfer"), ("initial", "unnamed"), ("lists", "refund"),
                           ("lists", "payout"), ("lists", "unnamed"), ("changed", "refund"),
                           ("longest_code", "refund"), ("longest_code", "payout")]
    ]
    h = history()
    doc["records"] = []
    for name, what in RECORD_FORMS:
        rec, leaf = h.record(name)
        doc["records"].append({"form": name, "description": what, "record": rec, "leaf": leaf.decode("utf-8"),
                               "leaf_hash": gen.lh(leaf).hex()})
    bundles = []
    for name, what, b, bad, expect in bundle_cases():
        exp = dict(expect)
        if bad is not None:
            exp["seq"] = b.seqs[bad]
        bundles.append({"name": name, "description": what, "expect": exp, "bundle": b.log.bundle(THREAD)})
    doc["bundles"] = bundles
    return doc


def main() -> int:
    OUT.write_bytes(gv.render(build()))
    print("wrote %s (%d bytes)" % (OUT, OUT.stat().st_size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
