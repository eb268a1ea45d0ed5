#!/usr/bin/env python3
"""Generator of tests/vectors/governance.json: known answers for the governance records and
rules of docs/protocol.md (v1 extension of issue 20).

The file holds, computed here from the contract (sections 2.1, 2.3, 6, 7.4-7.6 and 12):

* ``policy_documents``: policy documents with their canonical text and ``policy_digest``
  (section 12), and documents a verifier must find invalid, each naming the clause it breaks;
* ``resolution``: per-tool resolution of a document (a tool's entry over the default, field
  by field, ``redact`` added);
* ``records``: one record of each new form, as the gate writes it (the forms are checked
  against records the real binary wrote, in test_agreement.py), with its leaf (the record's
  RFC 8785 bytes) and leaf hash;
* ``bundles``: export bundles signed with the public test key of signed_note.json
  (``tlog_checkpoint``): a governed history that verifies, an old bundle without policy
  records, and one bundle per forbidden outcome (rules 6f and 8-12 of section 6.3, and the
  policy checks 11 and 12 of section 6.2), each with the problem a verifier must report.

Everything is deterministic (fixed timestamps, tickets and key; Ed25519 signatures are
deterministic), so running this again writes the same bytes; test_governance_vectors.py
checks that, and checks every expectation with both verifiers.

Run: python3 tests/interop/governance_vectors.py   (writes tests/vectors/governance.json)
"""

from __future__ import annotations

import base64
import copy
import json
import sys
from pathlib import Path

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import rfc8785  # noqa: E402

import test_verify_bundle_vectors as gen  # noqa: E402  (the synthetic log and its signing key)
import verify_bundle as vb  # noqa: E402

OUT = HERE.parents[1] / "tests" / "vectors" / "governance.json"
THREAD = "thread-7"
T0 = "2026-11-30T20:00:00.000000Z"


def T(seconds: int) -> str:
    return "2026-11-30T%02d:%02d:%02d.000000Z" % (20 + seconds // 3600, seconds // 60 % 60, seconds % 60)


def ticket(n: int) -> str:
    return "0192f3c0-2222-7000-8000-%012x" % n


SYSTEM = {"principal": "hitl-ledger", "role": "system"}
ADMIN = {"principal": "admin-1", "role": "admin"}
AGENT = {"principal": "agent-1", "role": "agent"}
ALICE = {"principal": "alice", "role": "reviewer"}
BOB = {"principal": "bob", "role": "reviewer"}
CAROL = {"principal": "carol", "role": "reviewer"}
BG = {"principal": "bg-1", "role": "break_glass"}

INITIAL = {
    "default": {"review_window_seconds": 3600, "approval_ttl_seconds": 600, "mode": "enforce", "redact": []},
    "tools": {"wire_transfer": {"approval_ttl_seconds": 300, "redact": ["/account"]}, "send_email": {"mode": "observe"}},
}
GOVERNED = {
    "default": {"review_window_seconds": 3600, "approval_ttl_seconds": 600, "mode": "enforce", "redact": []},
    "tools": {
        "refund": {"approvals_required": 2, "approvers": ["alice", "bob", "group:treasury"]},
        "payout": {"break_glass": True},
        "send_email": {"mode": "observe"},
    },
}
PAUSED = copy.deepcopy(GOVERNED)
PAUSED["tools"]["payout"]["mode"] = "paused"

ACTIONS = {
    "refund": {"tool": "refund", "args": {"amount_cents": 2500, "order_id": "O-19"}},
    "refund-edited": {"tool": "refund", "args": {"amount_cents": 2000, "order_id": "O-19"}},
    "payout": {"tool": "payout", "args": {"amount_cents": 90000, "payee": "P-7"}},
}


def digest(name: str) -> str:
    return gen.action_digest(ACTIONS[name])


def policy_body(doc: dict) -> dict:
    return {"policy": copy.deepcopy(doc), "policy_digest": vb.policy_digest(doc)}


def interrupt(name: str, interrupt_id: str, ts_s: int, policy_ref: str | None, edit_of=None,
              allowed=("approve", "edit", "reject")) -> dict:
    a = ACTIONS[name]
    b = {"interrupt_id": interrupt_id, "tool": a["tool"], "args": a["args"], "redacted": [],
         "action_digest": digest(name), "action_schema": "hitl-ledger/action/v1",
         "allowed_decisions": sorted(allowed), "expires_at": T(ts_s + 3600), "edit_of": edit_of}
    if policy_ref is not None:
        b["policy"] = "ref:" + policy_ref
    return b


def approval(tk=None, expires=None, counts=None, approved_as=None) -> dict:
    b = {"decision": "approve", "rationale": None, "ticket_id": tk, "expires_at": expires if tk else None,
         "edited_digest": None, "superseded_by": None}
    if counts:
        b["approvals"], b["approvals_required"] = counts
    if approved_as:
        b["approved_as"] = approved_as
    return b


def break_glass(tk, expires) -> dict:
    return dict(approval(tk, expires), break_glass=True, reason="payments outage")


def grant(tk, dig, ts, expires, granted=True, code=None, mode="enforce", would_deny=None) -> dict:
    return {"ticket_id": tk, "attempt_id": None, "action_digest": dig, "granted": granted, "code": code,
            "evaluated_at": ts, "expires_at": expires, "idempotency_key": ("5a" * 32) if granted else None,
            "mode": mode, "would_deny": would_deny}


def paused_denial(tk, dig, ts) -> dict:
    return grant(tk, dig, ts, None, granted=False, code="tool_paused")


def refusal(path: str, error: str, method="POST") -> dict:
    return {"method": method, "path": path, "error": error}


def review(ref: str, verdict="acknowledged") -> dict:
    return {"reviews": "ref:" + ref, "verdict": verdict, "rationale": "the outage was real"}


class Builder:
    """A log built record by record: (name, thread, kind, request_id, ts, actor, body)."""

    def __init__(self):
        self.log = gen.Log()
        self.seqs: dict[str, int] = {}

    def add(self, name, kind, rid, ts, actor, body, thread=THREAD) -> "Builder":
        body = copy.deepcopy(body)
        for k, v in body.items():
            if isinstance(v, str) and v.startswith("ref:"):
                body[k] = gen.lh(self.log.leaves[self.seqs[v[4:]]]).hex()
        if kind == "policy":
            thread = vb.POLICY_THREAD

        def tweak(rec):
            # the ledger's own records (policy, a refusal naming no request) name no run
            rec.update(request_id=rid, ts=ts, actor=actor, body=body, run_id="run-1" if rid else None,
                       checkpoint_id=None)

        assert name not in self.seqs
        self.seqs[name] = self.log.append(thread, kind, tweak=tweak)
        return self

    def record(self, name: str) -> tuple[dict, bytes]:
        leaf = self.log.leaves[self.seqs[name]]
        return json.loads(leaf), leaf


def governed_history() -> Builder:
    """Every governed outcome the rules allow, one thread (the record forms come from it)."""
    b = Builder()
    b.add("policy_initial", "policy", None, T(0), SYSTEM, policy_body(INITIAL))
    b.add("policy_change", "policy", None, T(10), ADMIN, policy_body(GOVERNED))
    b.add("interrupt_with_policy", "interrupt", "req-1", T(20), AGENT, interrupt("refund", "int-1", 20, "policy_change"))
    b.add("partial_approval", "decision", "req-1", T(30), ALICE, approval(counts=(1, 2), approved_as="alice"))
    b.add("governed_refusal", "refusal", "req-1", T(31), ALICE,
          refusal("/v1/requests/req-1/decision", "approver_already_approved"))
    b.add("final_approval_with_counts", "decision", "req-1", T(40), CAROL,
          approval(ticket(1), T(640), (2, 2), "group:treasury"))
    b.add("grant", "authorization", "req-1", T(50), AGENT, grant(ticket(1), digest("refund"), T(50), T(640)))
    b.add("policy_refusal", "refusal", None, T(55), ALICE, refusal("/v1/policy", "forbidden", "PUT"),
          thread="hitl-ledger/refusals")
    b.add("interrupt_payout", "interrupt", "req-2", T(60), AGENT, interrupt("payout", "int-2", 60, "policy_change"))
    b.add("break_glass_decision", "decision", "req-2", T(70), BG, break_glass(ticket(2), T(670)))
    b.add("review", "review", "req-2", T(80), ALICE, review("break_glass_decision"))
    b.add("interrupt_payout_2", "interrupt", "req-3", T(90), AGENT, interrupt("payout", "int-3", 90, "policy_change"))
    b.add("approval_payout", "decision", "req-3", T(100), BOB, approval(ticket(3), T(700)))
    b.add("policy_pause", "policy", None, T(110), ADMIN, policy_body(PAUSED))
    b.add("tool_paused_authorization", "authorization", "req-3", T(120), AGENT,
          paused_denial(ticket(3), digest("payout"), T(120)))
    b.add("policy_unpause", "policy", None, T(130), ADMIN, policy_body(GOVERNED))
    b.add("grant_after_unpause", "authorization", "req-3", T(140), AGENT, grant(ticket(3), digest("payout"), T(140), T(700)))
    b.add("interrupt_refund_2", "interrupt", "req-4", T(150), AGENT, interrupt("refund", "int-4", 150, "policy_unpause"))
    edit = {"decision": "edit", "rationale": "a smaller refund", "ticket_id": ticket(4), "expires_at": None,
            "edited_digest": digest("refund-edited"), "superseded_by": "req-5", "approved_as": "alice"}
    b.add("edit_with_approved_as", "decision", "req-4", T(160), ALICE, edit)
    b.add("edit_interrupt", "interrupt", "req-5", T(160), ALICE,
          interrupt("refund-edited", "int-4", 160, "policy_unpause", edit_of="req-4", allowed=("approve",)))
    b.add("edit_partial_approval", "decision", "req-5", T(160), ALICE,
          approval(counts=(1, 2), approved_as="alice") | {"rationale": "a smaller refund"})
    b.add("edit_final_approval", "decision", "req-5", T(170), BOB, approval(ticket(5), T(770), (2, 2), "bob"))
    return b


RECORD_FORMS = [
    ("policy_initial", "the policy record init writes (seq 0, the ledger's own actor)"),
    ("policy_change", "a policy record of a change (policy set, PUT /v1/policy)"),
    ("interrupt_with_policy", "an interrupt naming the policy record in force (body member policy)"),
    ("partial_approval", "a partial approval: ticket_id and expires_at null, the counts, approved_as a principal"),
    ("final_approval_with_counts", "the N-th approval: a ticket, the counts, approved_as a group entry"),
    ("governed_refusal", "a refused governed write, recorded in the request"),
    ("policy_refusal", "a refused PUT /v1/policy, recorded in hitl-ledger/refusals"),
    ("break_glass_decision", "a break-glass decision: break_glass true and the reason"),
    ("review", "the post-event review of a break-glass decision"),
    ("tool_paused_authorization", "an authorize of a paused tool: denied tool_paused, nothing consumed"),
    ("edit_with_approved_as", "an edit of a governed tool, with the approvers entry that admitted the editor"),
    ("edit_partial_approval", "the editor's approval of the edited call, partial where the tool needs more"),
]


def small(*extra) -> Builder:
    """The initial policy, a governed policy, an open refund request and an open payout
    request, then `extra` records (name, kind, request_id, ts, actor, body)."""
    b = Builder()
    b.add("p0", "policy", None, T(0), SYSTEM, policy_body(INITIAL))
    b.add("p1", "policy", None, T(10), ADMIN, policy_body(GOVERNED))
    b.add("i1", "interrupt", "req-1", T(20), AGENT, interrupt("refund", "int-1", 20, "p1"))
    b.add("i2", "interrupt", "req-2", T(30), AGENT, interrupt("payout", "int-2", 30, "p1"))
    for x in extra:
        b.add(*x)
    return b


def bundle_cases() -> list[tuple[str, str, Builder, str | None, dict]]:
    """(name, description, builder, record named by the expectation, expectation)."""
    partial = ("a1", "decision", "req-1", T(40), ALICE, approval(counts=(1, 2), approved_as="alice"))
    approved2 = ("a2", "decision", "req-2", T(40), BOB, approval(ticket(2), T(640)))
    pause = ("pp", "policy", None, T(50), ADMIN, policy_body(PAUSED))
    bg = ("bg", "decision", "req-2", T(40), BG, break_glass(ticket(2), T(640)))
    v = lambda rule: {"ok": False, "code": "rule_violation", "rule": rule}  # noqa: E731
    cases = [
        ("governed_history", "every governed outcome the rules allow", governed_history(), None, {"ok": True}),
        ("rule_6f_real_grant_of_a_paused_tool", "a payout approved before the pause, granted while paused",
         small(approved2, pause, ("bad", "authorization", "req-2", T(60), AGENT,
                                  grant(ticket(2), digest("payout"), T(60), T(640)))), "bad", v("6f")),
        ("rule_6f_observe_grant_of_a_paused_tool", "an observe-mode granted:true (would_deny set) of a paused tool",
         small(approved2, pause, ("bad", "authorization", "req-2", T(60), AGENT,
                                  grant(ticket(2), "sha256:" + "00" * 32, T(60), T(640), mode="observe",
                                        would_deny="approval_action_mismatch"))), "bad", v("6f")),
        ("rule_8_invalid_policy_document", "a policy record whose document breaks section 12 (approvals_required above the approvers named)",
         small(("bad", "policy", None, T(40), ADMIN,
                policy_body({"tools": {"refund": {"approvers": ["alice"], "approvals_required": 2}}}))), "bad", v("8")),
        ("rule_8_policy_digest_not_its_documents", "a policy record whose policy_digest is another document's",
         small(("bad", "policy", None, T(40), ADMIN, {"policy": PAUSED, "policy_digest": vb.policy_digest(GOVERNED)})),
         "bad", v("8")),
        ("rule_9_interrupt_naming_a_policy_not_in_force", "an interrupt naming the superseded initial policy record",
         small(("bad", "interrupt", "req-3", T(40), AGENT, interrupt("refund", "int-3", 40, "p0"))), "bad", v("9")),
        ("rule_10a_approval_by_the_requester", "the principal that opened the request approves it",
         small(("bad", "decision", "req-1", T(40), {"principal": "agent-1", "role": "reviewer"},
                approval(counts=(1, 2), approved_as="group:treasury"))), "bad", v("10a")),
        ("rule_10b_approved_as_absent", "a governed tool's approval without approved_as",
         small(("bad", "decision", "req-1", T(40), ALICE, approval(counts=(1, 2)))), "bad", v("10b")),
        ("rule_10b_approved_as_not_listed", "approved_as names no approvers entry",
         small(("bad", "decision", "req-1", T(40), {"principal": "dave", "role": "reviewer"},
                approval(counts=(1, 2), approved_as="dave"))), "bad", v("10b")),
        ("rule_10b_principal_entry_not_the_actor", "approved_as is another principal's entry",
         small(("bad", "decision", "req-1", T(40), ALICE, approval(counts=(1, 2), approved_as="bob"))), "bad", v("10b")),
        ("rule_10c_second_approval_by_the_same_reviewer", "alice approves twice; her second issues the ticket",
         small(partial, ("bad", "decision", "req-1", T(50), ALICE, approval(ticket(1), T(650), (2, 2), "alice"))),
         "bad", v("10c")),
        ("rule_10d_ticket_before_the_nth_approval", "the first of two approvals issues the ticket",
         small(("bad", "decision", "req-1", T(40), ALICE, approval(ticket(1), T(640), (1, 2), "alice"))), "bad", v("10d")),
        ("rule_10d_partial_approval_where_the_ticket_was_due", "the second approval issues no ticket",
         small(partial, ("bad", "decision", "req-1", T(50), BOB, approval(counts=(2, 2), approved_as="bob"))),
         "bad", v("10d")),
        ("rule_10d_counts_that_are_not_the_replays", "the second approval says it is the first",
         small(partial, ("bad", "decision", "req-1", T(50), BOB, approval(ticket(1), T(650), (1, 2), "bob"))),
         "bad", v("10d")),
        ("rule_11a_break_glass_by_an_agent", "a break-glass decision by an agent",
         small(("bad", "decision", "req-2", T(40), AGENT, break_glass(ticket(2), T(640)))), "bad", v("11a")),
        ("rule_11a_break_glass_by_a_reviewer", "a break-glass decision by a reviewer",
         small(("bad", "decision", "req-2", T(40), ALICE, break_glass(ticket(2), T(640)))), "bad", v("11a")),
        ("rule_11a_break_glass_role_without_the_mark", "a decision by the break_glass role without break_glass: true",
         small(("bad", "decision", "req-2", T(40), BG, approval(ticket(2), T(640)))), "bad", v("11a")),
        ("rule_11b_break_glass_where_not_allowed", "break-glass of a refund, whose policy does not allow it",
         small(("bad", "decision", "req-1", T(40), BG, break_glass(ticket(1), T(640)))), "bad", v("11b")),
        ("rule_12a_review_without_a_break_glass_use", "a review of a request approved by a reviewer",
         small(approved2, ("bad", "review", "req-2", T(50), ALICE, review("a2"))), "bad", v("12a")),
        ("rule_12b_review_by_the_break_glass_user", "bg-1 reviews its own break-glass use",
         small(bg, ("bad", "review", "req-2", T(50), {"principal": "bg-1", "role": "reviewer"}, review("bg"))),
         "bad", v("12b")),
        ("rule_12c_second_review", "a second review of one break-glass use",
         small(bg, ("r1", "review", "req-2", T(50), ALICE, review("bg")),
               ("bad", "review", "req-2", T(60), BOB, review("bg", "disputed"))), "bad", v("12c")),
        ("rule_12d_review_naming_another_record", "a review naming the interrupt, not the break-glass decision",
         small(bg, ("bad", "review", "req-2", T(50), ALICE, review("i2"))), "bad", v("12d")),
    ]
    return cases


def old_history() -> Builder:
    """A ledger from before policy records: no policy record, no new member."""
    b = Builder()
    i = interrupt("refund", "int-1", 0, None)
    b.add("i1", "interrupt", "req-1", T(0), AGENT, i)
    b.add("a1", "decision", "req-1", T(10), ALICE, approval(ticket(1), T(610)))
    b.add("g1", "authorization", "req-1", T(20), AGENT, grant(ticket(1), digest("refund"), T(20), T(610)))
    return b


def entry_of(bundle: dict, name_seq: int) -> dict:
    return next(e for e in bundle["records"] if e["seq"] == name_seq)


def build() -> dict:
    doc: dict = {
        "description": "Known answers for the governance records and rules of docs/protocol.md (issue 20, a v1 "
                       "extension): policy documents and their digests, per-tool resolution, one record of each new "
                       "form with its leaf and leaf hash, and export bundles whose expected verdicts follow from "
                       "sections 6.2 and 6.3. Generated by tests/interop/governance_vectors.py.",
        "origin": gen.ORIGIN,
        "verifier_key": gen.KEY,
        "signing_key": "the public test key of signed_note.json (tlog_checkpoint); never use it for anything else",
        "notes": [
            "policy_documents: validity is judged on `canonical`, the form a policy record holds (section 12); "
            "`policy_digest` is sha256: + hex SHA-256 of those bytes; `breaks` names the clause of section 12",
            "resolution: the resolved fields of `tool` under the named valid document (approvers null: every "
            "reviewer)",
            "records: `leaf` is the record's RFC 8785 text (UTF-8), `leaf_hash` hex SHA-256(0x00 || leaf)",
            "bundles: `expect.ok`, and for a problem its `code` and `seq` (null where no record is concerned); "
            "for rule_violation, `rule` is the rule of section 6.3 the message names",
        ],
    }
    valid = [
        ("initial", INITIAL),
        ("governed", GOVERNED),
        ("paused", PAUSED),
        ("empty", {}),
        ("group_makes_any_count_reachable", {"tools": {"refund": {"approvers": ["group:x"], "approvals_required": 5}}}),
        ("float_spelling_is_canonical", {"default": {"approval_ttl_seconds": 60.0}}),
    ]
    doc["policy_documents"] = [
        {"name": n, "valid": True, "document": d, "canonical": rfc8785.dumps(d).decode("utf-8"),
         "policy_digest": vb.policy_digest(d)} for n, d in valid
    ]
    invalid = [
        ("unknown_field", {"defaults": {}}, "an unknown field"),
        ("unknown_tool_field", {"tools": {"refund": {"approver": ["alice"]}}}, "an unknown field"),
        ("unknown_mode", {"default": {"mode": "pause"}}, "an unknown mode"),
        ("zero_duration", {"default": {"review_window_seconds": 0}}, "a zero duration"),
        ("fractional_duration", {"default": {"approval_ttl_seconds": 1.5}}, "a value of the wrong type"),
        ("zero_approvals_required", {"tools": {"refund": {"approvals_required": 0}}}, "a zero approvals_required"),
        ("more_approvals_than_approvers", {"tools": {"refund": {"approvers": ["alice", "bob"], "approvals_required": 3}}},
         "approvals_required exceeds the number of its approvers when they name no group"),
        ("more_approvals_than_inherited_approvers", {"default": {"approvers": ["alice"]},
                                                      "tools": {"refund": {"approvals_required": 2}}},
         "a resolved tool whose approvals_required exceeds the number of its approvers"),
        ("empty_approvers", {"tools": {"refund": {"approvers": []}}}, "an empty approvers list"),
        ("duplicated_approver", {"tools": {"refund": {"approvers": ["alice", "alice"]}}}, "a duplicated approvers list"),
        ("malformed_group_entry", {"tools": {"refund": {"approvers": ["group:"]}}}, "a malformed entry"),
        ("break_glass_not_boolean", {"tools": {"refund": {"break_glass": "yes"}}}, "a value of the wrong type"),
        ("malformed_pointer", {"default": {"redact": ["account"]}}, "a malformed pointer"),
        ("empty_pointer", {"default": {"redact": [""]}}, "a malformed pointer (the whole args)"),
        ("tool_name_not_an_id", {"tools": {"": {}}}, "a tool name that is not an id"),
    ]
    doc["policy_documents"] += [{"name": n, "valid": False, "document": d, "canonical": rfc8785.dumps(d).decode("utf-8"),
                                 "breaks": why} for n, d, why in invalid]
    doc["resolution"] = [
        {"document": "governed", "tool": t, "resolved": vb.resolve_tool(GOVERNED, t)}
        for t in ("refund", "payout", "send_email", "unnamed")
    ] + [
        {"document": "initial", "tool": t, "resolved": vb.resolve_tool(INITIAL, t)} for t in ("wire_transfer", "unnamed")
    ]
    h = governed_history()
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
    old = old_history()
    bundles.append({"name": "old_bundle_without_policy_records",
                    "description": "a bundle of a ledger from before policy records: no policy member, no new "
                                   "member; the empty policy document is in force", "expect": {"ok": True},
                    "bundle": old.log.bundle(THREAD)})
    g = governed_history()
    stripped = g.log.bundle(THREAD)
    del stripped["policy"]
    bundles.append({"name": "policy_member_stripped", "description": "the governed history without its policy member",
                    "expect": {"ok": False, "code": "policy_missing", "seq": g.seqs["interrupt_with_policy"]},
                    "bundle": stripped})
    gap = g.log.bundle(THREAD)
    del gap["policy"]["records"][1]
    bundles.append({"name": "policy_entry_removed", "description": "the second policy record removed from the member",
                    "expect": {"ok": False, "code": "thread_gap", "seq": g.seqs["policy_pause"]}, "bundle": gap})
    last = g.log.bundle(THREAD)
    last["policy"]["records"].pop()
    bundles.append({"name": "last_policy_entry_removed", "description": "the last policy record removed from the member",
                    "expect": {"ok": False, "code": "thread_head_mismatch", "seq": None}, "bundle": last})
    doc["bundles"] = bundles
    return doc


def render(doc: dict) -> bytes:
    """The file's bytes: indented JSON, each bundle on one line (they are long and read by
    programs), ASCII only."""
    marks = {}
    doc = copy.deepcopy(doc)
    for i, b in enumerate(doc["bundles"]):
        mark = "@@bundle-%d@@" % i
        marks[json.dumps(mark)] = json.dumps(b["bundle"], ensure_ascii=True, separators=(",", ":"))
        b["bundle"] = mark
    text = json.dumps(doc, indent=1, ensure_ascii=True)
    for mark, compact in marks.items():
        assert text.count(mark) == 1
        text = text.replace(mark, compact)
    return (text + "\n").encode("ascii")


def main() -> int:
    OUT.write_bytes(render(build()))
    print("wrote %s (%d bytes)" % (OUT, OUT.stat().st_size))
    return 0


if __name__ == "__main__":
    sys.exit(main())
