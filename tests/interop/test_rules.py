"""Tests of the approval-rule replay of the independent bundle verifier (`rule_violation`).

After every structural check of a bundle passed, verify_bundle.py replays the approval
rules (docs/protocol.md: approval semantics, idempotent appends, export bundle) over the
bundle's records and reports `rule_violation` at the first record whose outcome they
forbid. Each test below builds a thread with the synthetic generator of
test_verify_bundle_vectors.py (so every bundle is freshly chained, proven and signed, and
passes every structural check), writes one forbidden record into an otherwise valid
history, and checks the problem code, the seq of exactly that record and the rule named
in the message. Every bundle is also checked with the Rust `hitl-ledger verify-export`,
which must agree on the exit status, the problem code and its seq. Rule numbers are those
of the rule list in docs/protocol.md:

  1 second interrupt; 2 no interrupt before; 3a second closing record; 3b closing at or
  after the review deadline; 3 ticket id issued twice; 4a/4b/4c timeouts; 5a/5c
  revocations; 6a-6e real grants; 7 follow-ups.

Run: python3 -m pytest tests/interop (needs `cryptography`, `rfc8785`, `pytest`).
"""

from __future__ import annotations

import base64
import copy
import json
import subprocess
import sys
from datetime import datetime, timedelta
from pathlib import Path

import pytest

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))

import test_verify_bundle_vectors as gen  # noqa: E402  (the synthetic bundle generator)
import verify_bundle as vb  # noqa: E402

THREAD = "thread-rules"
OTHER = "thread-other"
BASE = datetime(2026, 11, 30, 20, 0, 0)


def T(seconds: int, micros: int = 0) -> str:
    """The instant `seconds` (+ `micros`) after 2026-11-30T20:00:00Z, as a record timestamp."""
    return (BASE + timedelta(seconds=seconds, microseconds=micros)).strftime("%Y-%m-%dT%H:%M:%S.%fZ")


def ticket(n: int) -> str:
    return "0192f3c0-1111-7000-8000-%012x" % n


def refund(cents: int) -> dict:
    return {"tool": "refund", "args": {"amount_cents": cents, "currency": "EUR"}}


def email(to: str) -> dict:
    return {"tool": "send_email", "args": {"to": to, "subject": "hello"}}


ACTIONS = {
    "r1": refund(500), "r2": refund(99999), "r3": refund(700), "r4": refund(650),
    "r5": email("a@example.com"), "r6": refund(42), "r7": refund(43), "r8": refund(44),
    "r9": refund(45), "r10": refund(46),
}
DIGEST = {r: gen.action_digest(a) for r, a in ACTIONS.items()}
OTHER_DIGEST = gen.action_digest(refund(1))


# ---------------------------------------------------------------------------
# Record bodies (docs/protocol.md, records: bodies)


def interrupt(rid, deadline, edit_of=None, allowed=("approve", "edit", "reject")):
    a = ACTIONS[rid]
    return {"interrupt_id": "int-" + rid, "tool": a["tool"], "args": a["args"], "redacted": [],
            "action_digest": DIGEST[rid], "action_schema": "hitl-ledger/action/v1",
            "allowed_decisions": sorted(allowed), "expires_at": deadline, "edit_of": edit_of}


def approve(tk, expires_at):
    return {"decision": "approve", "rationale": None, "ticket_id": tk, "expires_at": expires_at,
            "edited_digest": None, "superseded_by": None}


def edit(tk, new_rid):
    return {"decision": "edit", "rationale": "smaller amount", "ticket_id": tk, "expires_at": None,
            "edited_digest": DIGEST[new_rid], "superseded_by": new_rid}


def reject(tk):
    return {"rationale": "amount too large", "ticket_id": tk}


def authorization(tk, digest, ts, expires_at, granted=True, code=None, mode="enforce", would_deny=None):
    return {"ticket_id": tk, "attempt_id": None, "action_digest": digest, "granted": granted, "code": code,
            "evaluated_at": ts, "expires_at": expires_at, "idempotency_key": "ab" * 32 if granted else None,
            "mode": mode, "would_deny": would_deny}


def follow_up(follows):
    # `follows` is the name of an earlier record (resolved to its leaf hash when built) or a hex string
    return {"follow_up_id": "fu-1", "follows": follows, "outcome": "done", "detail": None, "operation_id": None}


def timeout(expires_at):
    return {"expires_at": expires_at}


def revocation():
    return {"reason": "no longer needed"}


def refusal():
    return {"method": "PUT", "path": "/v1/requests/x/decision", "error": "append_only"}


ROLES = {"decision": "reviewer", "rejection": "reviewer", "timeout": "system"}


# ---------------------------------------------------------------------------
# Histories and bundles


class History:
    """One thread's records as (name, kind, request_id, ts, body), in order."""

    def __init__(self):
        self.specs: list[tuple[str, str, str | None, str, dict]] = []

    def add(self, name, kind, rid, ts, body) -> "History":
        assert name not in self.names()
        self.specs.append((name, kind, rid, ts, body))
        return self

    def names(self) -> list[str]:
        return [s[0] for s in self.specs]

    def with_record(self, name, kind, rid, ts, body, after: str | None = None) -> "History":
        """A copy with one more record, after record `after` (default: at the end)."""
        h = History()
        h.specs = copy.deepcopy(self.specs)
        pos = len(h.specs) if after is None else h.names().index(after) + 1
        h.specs.insert(pos, (name, kind, rid, ts, copy.deepcopy(body)))
        return h

    def build(self) -> tuple[dict, dict[str, int]]:
        """The thread's bundle (every record chained, proven, signed) and each record's seq.

        A record of another thread precedes each record, so seq and thread_seq differ."""
        log = gen.Log()
        seqs: dict[str, int] = {}
        for name, kind, rid, ts, body in self.specs:
            log.append(OTHER, kind="refusal")
            body = copy.deepcopy(body)
            if kind == "follow_up" and body.get("follows") in seqs:
                body["follows"] = gen.lh(log.leaves[seqs[body["follows"]]]).hex()

            def tweak(rec, kind=kind, rid=rid, ts=ts, body=body):
                rec.update(request_id=rid, ts=ts, body=body)
                rec["actor"] = {"principal": "hitl-ledger" if kind == "timeout" else "user-1",
                                "role": ROLES.get(kind, "agent")}

            seqs[name] = log.append(THREAD, kind, tweak=tweak)
        return log.bundle(THREAD), seqs


D = T(3600)  # the review deadline of most requests


def good_history() -> History:
    """A well-formed history: every outcome the rules allow, and none they forbid."""
    h = History()
    # interrupt -> approve -> real grant -> follow-up
    h.add("i1", "interrupt", "r1", T(1), interrupt("r1", D))
    h.add("a1", "decision", "r1", T(2), approve(ticket(1), T(602)))
    h.add("g1", "authorization", "r1", T(3), authorization(ticket(1), DIGEST["r1"], T(3), T(602)))
    h.add("f1", "follow_up", "r1", T(4), follow_up("g1"))
    # a rejection, and a denied authorization with its ticket
    h.add("i2", "interrupt", "r2", T(5), interrupt("r2", D))
    h.add("x2", "rejection", "r2", T(6), reject(ticket(2)))
    h.add("n2", "authorization", "r2", T(7),
          authorization(ticket(2), DIGEST["r2"], T(7), None, granted=False, code="approval_rejected"))
    # an edit, its new request's interrupt and approval (one atomic write), a grant of the new ticket
    h.add("i3", "interrupt", "r3", T(8), interrupt("r3", D))
    h.add("e3", "decision", "r3", T(9), edit(ticket(3), "r4"))
    h.add("i4", "interrupt", "r4", T(9), interrupt("r4", T(3609), edit_of="r3", allowed=("approve",)))
    h.add("a4", "decision", "r4", T(9), approve(ticket(4), T(309)))
    h.add("g4", "authorization", "r4", T(10), authorization(ticket(4), DIGEST["r4"], T(10), T(309)))
    h.add("n3", "authorization", "r3", T(11),
          authorization(ticket(3), DIGEST["r3"], T(11), None, granted=False, code="approval_superseded"))
    # observe mode: a would-deny grant (another action) does not consume; the passing one is real
    h.add("i5", "interrupt", "r5", T(12), interrupt("r5", D))
    h.add("a5", "decision", "r5", T(13), approve(ticket(5), T(613)))
    h.add("o5", "authorization", "r5", T(14),
          authorization(ticket(5), gen.action_digest(email("b@example.com")), T(14), T(613), mode="observe",
                        would_deny="approval_action_mismatch"))
    h.add("g5", "authorization", "r5", T(15), authorization(ticket(5), DIGEST["r5"], T(15), T(613), mode="observe"))
    # a denial of an approved request (another action)
    h.add("i6", "interrupt", "r6", T(16), interrupt("r6", D))
    h.add("a6", "decision", "r6", T(17), approve(ticket(6), T(617)))
    h.add("n6", "authorization", "r6", T(18),
          authorization(ticket(6), OTHER_DIGEST, T(18), T(617), granted=False, code="approval_action_mismatch"))
    # a timeout exactly at the deadline
    h.add("i7", "interrupt", "r7", T(19), interrupt("r7", T(20)))
    h.add("t7", "timeout", "r7", T(20), timeout(T(20)))
    # revocation after an approval, then a denial; revocation of a used approval
    h.add("i8", "interrupt", "r8", T(21), interrupt("r8", D))
    h.add("a8", "decision", "r8", T(22), approve(ticket(8), T(622)))
    h.add("v8", "revocation", "r8", T(23), revocation())
    h.add("n8", "authorization", "r8", T(24),
          authorization(ticket(8), DIGEST["r8"], T(24), T(622), granted=False, code="approval_revoked"))
    h.add("v1", "revocation", "r1", T(25), revocation())
    h.add("f8", "follow_up", "r8", T(26), follow_up("v8"))
    # revocation of an open request before its deadline
    h.add("i9", "interrupt", "r9", T(27), interrupt("r9", D))
    h.add("v9", "revocation", "r9", T(28), revocation())
    # refusals: one naming no request, one naming a request
    h.add("rf0", "refusal", None, T(29), refusal())
    h.add("rf1", "refusal", "r1", T(30), refusal())
    return h


GOOD = good_history()
LATER = T(40)  # a ts after the whole good history, before every approval's expires_at


BIN = Path(
    __import__("os").environ.get("HITL_LEDGER_BIN")
    or Path.home() / ".cache" / "hitl-ledger" / "target" / "debug" / "hitl-ledger"
)


def rust_verdict(bundle: dict) -> tuple[int, dict]:
    """`hitl-ledger verify-export --format json` on the bundle: (exit status, report)."""
    assert BIN.is_file(), f"the hitl-ledger binary is missing at {BIN}: build it (scripts/test.sh does)"
    import tempfile

    with tempfile.NamedTemporaryFile("wb", suffix=".json") as f:
        f.write(json.dumps(bundle).encode())
        f.flush()
        p = subprocess.run(
            [str(BIN), "verify-export", f.name, "--key", gen.KEY, "--format", "json"],
            capture_output=True,
            timeout=60,
        )
    return p.returncode, json.loads(p.stdout)


def verify(h: History) -> tuple[dict, dict[str, int]]:
    """The Python verdict on the history's bundle, after checking that Rust agrees with it."""
    bundle, seqs = h.build()
    r = gen.run(bundle)
    status, rust = rust_verdict(bundle)
    assert status == vb.exit_status(r), (status, rust, r)
    py_problem = r["problem"] and (r["problem"]["code"], r["problem"]["seq"])
    rust_problem = rust["problem"] and (rust["problem"]["code"], rust["problem"]["seq"])
    assert py_problem == rust_problem, (rust, r)
    return r, seqs


def assert_violation(h: History, name: str, rule: str, phrase: str):
    """The bundle fails with rule_violation at record `name`, and the message names the rule."""
    r, seqs = verify(h)
    assert r["ok"] is False, r
    assert r["problem"]["code"] == "rule_violation", r
    assert r["problem"]["seq"] == seqs[name], (r, seqs[name])
    msg = r["problem"]["message"]
    assert msg.startswith("rule %s: " % rule) and phrase in msg, msg
    assert vb.exit_status(r) == 1


def test_well_formed_history_passes():
    r, seqs = verify(GOOD)
    assert r["problem"] is None and r["ok"] is True, r
    assert r["records"] == len(GOOD.specs) and r["decisions"] == 6 and r["rejections"] == 1
    assert r["first_ts"] == T(1) and r["last_ts"] == T(30)
    assert list(seqs.values()) == [2 * i + 1 for i in range(len(GOOD.specs))]


def test_every_prefix_of_the_well_formed_history_passes():
    for n in range(1, len(GOOD.specs) + 1):
        h = History()
        h.specs = GOOD.specs[:n]
        assert verify(h)[0]["ok"], n


# ---------------------------------------------------------------------------
# 1. a second interrupt


def test_rule_1_second_interrupt_of_a_request():
    assert_violation(GOOD.with_record("bad", "interrupt", "r1", LATER, interrupt("r1", D)),
                     "bad", "1", "a second interrupt of request")


def test_rule_1_second_interrupt_right_after_the_first():
    h = GOOD.with_record("bad", "interrupt", "r1", T(1), interrupt("r1", D), after="i1")
    assert_violation(h, "bad", "1", "a second interrupt of request")


# ---------------------------------------------------------------------------
# 2. a record of a request with no interrupt before it

NO_INTERRUPT_BODIES = {
    "decision": approve(ticket(90), T(900)),
    "rejection": reject(ticket(90)),
    "authorization": authorization(ticket(1), DIGEST["r1"], LATER, T(602), granted=False, code="approval_not_found"),
    "timeout": timeout(D),
    "revocation": revocation(),
    "follow_up": follow_up("g1"),
    "refusal": refusal(),
}


@pytest.mark.parametrize("kind", sorted(NO_INTERRUPT_BODIES))
def test_rule_2_record_of_a_request_without_interrupt(kind):
    h = GOOD.with_record("bad", kind, "r-unknown", LATER, NO_INTERRUPT_BODIES[kind])
    assert_violation(h, "bad", "2", "which has no interrupt before it")


def test_rule_2_decision_before_its_interrupt():
    h = GOOD.with_record("bad", "decision", "r10", LATER, approve(ticket(10), T(640)))
    h = h.with_record("i10", "interrupt", "r10", LATER, interrupt("r10", D))
    assert_violation(h, "bad", "2", "which has no interrupt before it")


# ---------------------------------------------------------------------------
# 3. decisions and rejections

SECOND_CLOSING = {
    "approve after an approval": ("decision", "r6", approve(ticket(90), T(900))),
    "rejection after an approval": ("rejection", "r6", reject(ticket(90))),
    "approve after a rejection": ("decision", "r2", approve(ticket(90), T(900))),
    "rejection after an edit": ("rejection", "r3", reject(ticket(90))),
    "approve after a revocation of the open request": ("decision", "r9", approve(ticket(90), T(900))),
    "approve after a timeout": ("decision", "r7", approve(ticket(90), T(900))),
}


@pytest.mark.parametrize("case", sorted(SECOND_CLOSING))
def test_rule_3a_second_closing_record(case):
    kind, rid, body = SECOND_CLOSING[case]
    assert_violation(GOOD.with_record("bad", kind, rid, LATER, body), "bad", "3a", "a second closing record")


def test_rule_3a_second_approval_in_the_edit_write():
    # the edit's new request approved twice in the same atomic write
    h = GOOD.with_record("bad", "decision", "r4", T(9), approve(ticket(90), T(309)), after="a4")
    assert_violation(h, "bad", "3a", "a second closing record")


def _open_r10(deadline=T(50)) -> History:
    return GOOD.with_record("i10", "interrupt", "r10", LATER, interrupt("r10", deadline))


def test_rule_3b_approval_at_the_review_deadline():
    h = _open_r10().with_record("bad", "decision", "r10", T(50), approve(ticket(10), T(650)))
    assert_violation(h, "bad", "3b", "a closing record at or after the review deadline")


def test_rule_3b_rejection_after_the_review_deadline():
    h = _open_r10().with_record("bad", "rejection", "r10", T(50, 1), reject(ticket(10)))
    assert_violation(h, "bad", "3b", "a closing record at or after the review deadline")


def test_rule_3b_edit_after_the_review_deadline():
    h = _open_r10().with_record("bad", "decision", "r10", T(3000), edit(ticket(10), "r4"))
    assert_violation(h, "bad", "3b", "a closing record at or after the review deadline")


def test_rule_3b_approval_one_microsecond_before_the_deadline_passes():
    h = _open_r10().with_record("ok", "decision", "r10", T(49, 999999), approve(ticket(10), T(650)))
    assert verify(h)[0]["ok"]


def test_rule_3_ticket_id_issued_twice_by_two_approvals():
    h = _open_r10().with_record("bad", "decision", "r10", LATER, approve(ticket(6), T(640)))
    assert_violation(h, "bad", "3", "a ticket id issued twice")


def test_rule_3_ticket_id_issued_twice_by_a_rejection():
    h = _open_r10().with_record("bad", "rejection", "r10", LATER, reject(ticket(1)))
    assert_violation(h, "bad", "3", "a ticket id issued twice")


# ---------------------------------------------------------------------------
# 4. timeouts


def test_rule_4a_timeout_of_an_approved_request():
    h = GOOD.with_record("bad", "timeout", "r6", D, timeout(D))
    assert_violation(h, "bad", "4a", "a second closing record")


def test_rule_4a_second_timeout():
    h = GOOD.with_record("bad", "timeout", "r7", LATER, timeout(T(20)))
    assert_violation(h, "bad", "4a", "a second closing record")


def test_rule_4b_timeout_before_the_review_deadline():
    h = _open_r10().with_record("bad", "timeout", "r10", T(49, 999999), timeout(T(50)))
    assert_violation(h, "bad", "4b", "a timeout before the review deadline")


def test_rule_4c_timeout_naming_another_deadline():
    h = _open_r10().with_record("bad", "timeout", "r10", T(51), timeout(T(50, 1)))
    assert_violation(h, "bad", "4c", "a timeout naming another deadline")


def test_rule_4c_timeout_naming_an_earlier_deadline():
    h = _open_r10().with_record("bad", "timeout", "r10", T(50), timeout(T(49)))
    assert_violation(h, "bad", "4c", "a timeout naming another deadline")


def test_rule_4_timeout_after_the_deadline_passes():
    h = _open_r10().with_record("ok", "timeout", "r10", T(55), timeout(T(50)))
    assert verify(h)[0]["ok"]


# ---------------------------------------------------------------------------
# 5. revocations


def test_rule_5a_revocation_of_an_overdue_request():
    h = _open_r10().with_record("bad", "revocation", "r10", T(50), revocation())
    assert_violation(h, "bad", "5a", "a revocation of an overdue request")


REVOKE_CLOSED = {
    "rejected": "r2",
    "edited": "r3",
    "timed out": "r7",
    "already revoked": "r8",  # approved, then revoked
}


@pytest.mark.parametrize("state", sorted(REVOKE_CLOSED))
def test_rule_5c_revocation_of_a_closed_request(state):
    h = GOOD.with_record("bad", "revocation", REVOKE_CLOSED[state], LATER, revocation())
    assert_violation(h, "bad", "5c", "a revocation of a request that is %s" % state)


def test_rule_5c_second_revocation_of_a_request_revoked_while_open():
    h = GOOD.with_record("bad", "revocation", "r9", LATER, revocation())
    assert_violation(h, "bad", "5c", "a revocation of a request that is already revoked")


# ---------------------------------------------------------------------------
# 6. real grants

NOT_AN_APPROVAL_TICKET = {
    "unknown ticket": ("r6", ticket(99), DIGEST["r6"]),
    "rejection's ticket": ("r2", ticket(2), DIGEST["r2"]),
    "edit's ticket": ("r3", ticket(3), DIGEST["r3"]),
    "approval of another request": ("r6", ticket(4), DIGEST["r6"]),
}


@pytest.mark.parametrize("case", sorted(NOT_AN_APPROVAL_TICKET))
def test_rule_6a_grant_with_a_ticket_not_issued_by_an_approval_of_its_request(case):
    rid, tk, digest = NOT_AN_APPROVAL_TICKET[case]
    h = GOOD.with_record("bad", "authorization", rid, LATER, authorization(tk, digest, LATER, T(600)))
    assert_violation(h, "bad", "6a", "ticket not issued by an approval of its request")


def test_rule_6a_grant_with_a_ticket_issued_later():
    h = _open_r10().with_record("bad", "authorization", "r10", LATER,
                                authorization(ticket(10), DIGEST["r10"], LATER, T(640)))
    h = h.with_record("a10", "decision", "r10", LATER, approve(ticket(10), T(640)))
    assert_violation(h, "bad", "6a", "ticket not issued by an approval of its request")


def test_rule_6b_grant_whose_digest_is_not_the_approved_one():
    h = GOOD.with_record("bad", "authorization", "r6", LATER, authorization(ticket(6), OTHER_DIGEST, LATER, T(617)))
    assert_violation(h, "bad", "6b", "digest is not the approved one")


def test_rule_6b_grant_in_the_edited_request_with_the_original_digest():
    h = GOOD.with_record("bad", "authorization", "r4", T(11), authorization(ticket(4), DIGEST["r3"], T(11), T(309)),
                         after="g4")
    assert_violation(h, "bad", "6b", "digest is not the approved one")


def test_rule_6c_grant_at_the_approvals_expires_at():
    h = GOOD.with_record("bad", "authorization", "r6", T(617), authorization(ticket(6), DIGEST["r6"], T(617), T(617)))
    assert_violation(h, "bad", "6c", "grant at or after the approval's expires_at")


def test_rule_6c_grant_after_the_approvals_expires_at():
    h = GOOD.with_record("bad", "authorization", "r6", T(3000), authorization(ticket(6), DIGEST["r6"], T(3000), T(617)))
    assert_violation(h, "bad", "6c", "grant at or after the approval's expires_at")


def test_rule_6c_grant_one_microsecond_before_expires_at_passes():
    h = GOOD.with_record("ok", "authorization", "r6", T(616, 999999),
                         authorization(ticket(6), DIGEST["r6"], T(616, 999999), T(617)))
    assert verify(h)[0]["ok"]


def test_rule_6d_grant_after_a_revocation():
    h = GOOD.with_record("bad", "authorization", "r8", LATER, authorization(ticket(8), DIGEST["r8"], LATER, T(622)))
    assert_violation(h, "bad", "6d", "grant after a revocation")


def test_rule_6e_second_real_grant_of_one_ticket():
    h = GOOD.with_record("bad", "authorization", "r5", LATER,
                         authorization(ticket(5), DIGEST["r5"], LATER, T(613), mode="observe"))
    assert_violation(h, "bad", "6e", "a second real grant of one ticket")


def test_rule_6e_second_real_grant_right_after_the_first():
    h = GOOD.with_record("bad", "authorization", "r4", T(10), authorization(ticket(4), DIGEST["r4"], T(10), T(309)),
                         after="g4")
    assert_violation(h, "bad", "6e", "a second real grant of one ticket")


def test_rule_6_checks_in_order_first_failure_names_the_rule():
    # another digest, at expires_at, after a revocation, ticket already used: 6b is checked first
    h = GOOD.with_record("bad", "authorization", "r1", T(602), authorization(ticket(1), OTHER_DIGEST, T(602), T(602)))
    assert_violation(h, "bad", "6b", "digest is not the approved one")
    # at expires_at, after a revocation, already used: 6c
    h = GOOD.with_record("bad", "authorization", "r1", T(602), authorization(ticket(1), DIGEST["r1"], T(602), T(602)))
    assert_violation(h, "bad", "6c", "grant at or after the approval's expires_at")
    # after a revocation and already used: 6d
    h = GOOD.with_record("bad", "authorization", "r1", LATER, authorization(ticket(1), DIGEST["r1"], LATER, T(602)))
    assert_violation(h, "bad", "6d", "grant after a revocation")


def test_rule_6_denials_and_observe_would_deny_grants_are_never_violations():
    h = GOOD
    for i, (rid, tk, digest) in enumerate([("r6", ticket(99), OTHER_DIGEST), ("r2", ticket(2), DIGEST["r2"]),
                                           ("r1", ticket(1), DIGEST["r1"]), ("r8", ticket(8), DIGEST["r8"])]):
        h = h.with_record("deny%d" % i, "authorization", rid, T(3000),
                          authorization(tk, digest, T(3000), None, granted=False, code="approval_expired"))
        h = h.with_record("observe%d" % i, "authorization", rid, T(3000),
                          authorization(tk, digest, T(3000), None, mode="observe", would_deny="approval_expired"))
    assert verify(h)[0]["ok"]


# ---------------------------------------------------------------------------
# 7. follow-ups


def test_rule_7_follow_up_that_follows_a_record_of_another_request():
    h = GOOD.with_record("bad", "follow_up", "r6", LATER, follow_up("g1"))
    assert_violation(h, "bad", "7", "a follow-up that follows a record of another request")


def test_rule_7_follow_up_that_follows_an_unknown_record():
    h = GOOD.with_record("bad", "follow_up", "r6", LATER, follow_up("cd" * 32))
    assert_violation(h, "bad", "7", "a follow-up that follows a record of another request")


def test_rule_7_follow_up_that_follows_a_refusal_naming_no_request():
    h = GOOD.with_record("bad", "follow_up", "r1", LATER, follow_up("rf0"))
    assert_violation(h, "bad", "7", "a follow-up that follows a record of another request")


def test_rule_7_follow_up_of_an_earlier_record_of_its_request_passes():
    h = GOOD.with_record("ok", "follow_up", "r2", LATER, follow_up("i2"))
    assert verify(h)[0]["ok"]


# ---------------------------------------------------------------------------
# Which violation, and precedence


def test_two_violations_report_the_earlier_one():
    first = ("early", "authorization", "r4", T(10), authorization(ticket(4), DIGEST["r4"], T(10), T(309)))
    second = ("late", "interrupt", "r1", LATER, interrupt("r1", D))
    h = GOOD.with_record(*first, after="g4").with_record(*second)
    assert_violation(h, "early", "6e", "a second real grant of one ticket")
    # the same two rules the other way round
    h = GOOD.with_record("early", "interrupt", "r1", T(9), interrupt("r1", D), after="i3")
    h = h.with_record("late", "authorization", "r5", LATER,
                      authorization(ticket(5), DIGEST["r5"], LATER, T(613), mode="observe"))
    assert_violation(h, "early", "1", "a second interrupt of request")


def _with_early_violation() -> History:
    return GOOD.with_record("bad", "follow_up", "r6", T(18), follow_up("g1"), after="n6")


def test_structural_problem_in_a_later_record_takes_precedence_over_a_rule_violation():
    bundle, seqs = _with_early_violation().build()
    assert gen.run(bundle)["problem"]["code"] == "rule_violation"
    last = bundle["records"][-1]
    raw = base64.b64decode(last["leaf"]).replace(b"append_only", b"append_onlx")
    gen.set_leaf(last, raw)
    r = gen.run(bundle)
    assert (r["problem"]["code"], r["problem"]["seq"]) == ("inclusion_proof", last["seq"]), r
    assert last["seq"] > seqs["bad"]


def test_thread_head_mismatch_takes_precedence_over_a_rule_violation():
    bundle, _ = _with_early_violation().build()
    del bundle["records"][-1]
    r = gen.run(bundle)
    assert (r["problem"]["code"], r["problem"]["seq"]) == ("thread_head_mismatch", None), r


def test_structural_problem_in_the_violating_record_takes_precedence():
    bundle, seqs = _with_early_violation().build()
    entry = next(e for e in bundle["records"] if e["seq"] == seqs["bad"])
    entry["inclusion_proof"] = entry["inclusion_proof"][:-1]
    r = gen.run(bundle)
    assert (r["problem"]["code"], r["problem"]["seq"]) == ("inclusion_proof", seqs["bad"]), r


def test_rule_violation_on_the_command_line(tmp_path):
    bundle, seqs = _with_early_violation().build()
    f = tmp_path / "bundle.json"
    f.write_text(json.dumps(bundle), "utf-8")
    p = subprocess.run([sys.executable, str(HERE / "verify_bundle.py"), str(f), "--key", gen.KEY, "--json"],
                       capture_output=True, timeout=60)
    assert p.returncode == 1, p
    out = json.loads(p.stdout)
    assert out["ok"] is False and set(out["problem"]) == {"code", "message", "seq"}
    assert (out["problem"]["code"], out["problem"]["seq"]) == ("rule_violation", seqs["bad"])
    p = subprocess.run([sys.executable, str(HERE / "verify_bundle.py"), str(f), "--key", gen.KEY],
                       capture_output=True, timeout=60)
    assert p.returncode == 1 and b"FAILED rule_violation at seq %d: rule 7: " % seqs["bad"] in p.stderr, p


def test_malformed_bodies_are_envelope_problems_before_any_replay():
    """A body lacking its kind's fields, or holding one of the wrong type, is refused with the
    envelope (`envelope`, a structural check) by both verifiers, so the replay only ever reads
    well-typed bodies."""
    cases = [
        GOOD.with_record("bad", "decision", "r1", LATER, {}),
        GOOD.with_record("bad", "revocation", "r1", LATER, {}),
        GOOD.with_record("bad", "timeout", "r1", LATER, {"expires_at": "tomorrow"}),
        GOOD.with_record("bad", "follow_up", "r1", LATER, {}),
        GOOD.with_record("bad", "authorization", "r6", LATER, {"granted": True}),
        GOOD.with_record("bad", "interrupt", "r10", LATER, {"expires_at": "tomorrow"}),
    ]
    grant = authorization(ticket(10), DIGEST["r10"], LATER, None)
    del grant["would_deny"]
    cases.append(_open_r10().with_record("bad", "authorization", "r10", LATER, grant))
    for h in cases:
        r, seqs = verify(h)
        assert r["problem"]["code"] == "envelope", r
        assert r["problem"]["seq"] == seqs["bad"], (r, seqs)
        assert vb.exit_status(r) == 1
